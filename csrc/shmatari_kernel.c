/*
 * shmatari frame kernel. See shmatari_kernel.h for the contract.
 *
 * The area weights follow OpenCV's computeResizeAreaTab (imgproc/resize.cpp):
 * for output cell d the source interval is [d * scale, (d + 1) * scale) with
 * scale = 1 / (dst / src) in double precision; partial pixels at either end
 * get weight (covered length / cell width), whole pixels 1 / cell width, and
 * ends covering 1e-3 of a pixel or less are dropped. Here every output cell
 * holds the same number of taps (kx or ky), the missing ones padded at the
 * end with weight 0: adding 0 * s to a float sum leaves it unchanged, so the
 * padded sums are bit-identical to OpenCV's variable-length ones, and the
 * fixed tap count lets the compiler vectorise across output columns.
 *
 * Atari screens repeat rows a lot (90 % of Breakout's rows equal the row
 * above). A source row equal to the one above has equal horizontal sums, so
 * the kernel reuses them instead of computing them again: exact, and most
 * of the saving on real frames.
 */
#include "shmatari_kernel.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The hot functions get an AVX2 clone on x86-64 Linux with GCC, chosen at
 * load time; elsewhere the portable build runs. Neither contracts a*b+c. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    defined(__linux__)
#define SHMATARI_HOT __attribute__((target_clones("avx2", "default")))
#else
#define SHMATARI_HOT
#endif

static double area_scale(int src, int dst) {
  double inv = (double)dst / (double)src;
  return 1.0 / inv;
}

/* Writes the taps of output cell d (in OpenCV's order) and returns their
 * number. index/weight may be NULL to count only. */
static int area_cell(int ssize, double scale, int d, int32_t *index,
                     float *weight) {
  double f1 = d * scale;
  double f2 = f1 + scale;
  double cell = scale < ssize - f1 ? scale : ssize - f1;
  int s1 = (int)ceil(f1);
  int s2 = (int)floor(f2);
  int n = 0;
  if (s2 > ssize - 1) s2 = ssize - 1;
  if (s1 > s2) s1 = s2;
  if (s1 - f1 > 1e-3) {
    if (index) {
      index[n] = s1 - 1;
      weight[n] = (float)((s1 - f1) / cell);
    }
    n++;
  }
  for (int s = s1; s < s2; s++) {
    if (index) {
      index[n] = s;
      weight[n] = (float)(1.0 / cell);
    }
    n++;
  }
  if (f2 - s2 > 1e-3) {
    if (index) {
      double part = f2 - s2 < 1.0 ? f2 - s2 : 1.0;
      if (part > cell) part = cell;
      index[n] = s2;
      weight[n] = (float)(part / cell);
    }
    n++;
  }
  return n;
}

/* Fills a tap-major [k * dsize] table; returns k, or -1 when out of memory. */
static int area_table(int ssize, int dsize, int32_t **index_out,
                      float **weight_out) {
  double scale = area_scale(ssize, dsize);
  int k = 1;
  for (int d = 0; d < dsize; d++) {
    int n = area_cell(ssize, scale, d, NULL, NULL);
    if (n > k) k = n;
  }
  int32_t *index = (int32_t *)malloc((size_t)dsize * k * sizeof(int32_t));
  float *weight = (float *)malloc((size_t)dsize * k * sizeof(float));
  int32_t *cell_index = (int32_t *)malloc((size_t)k * sizeof(int32_t));
  float *cell_weight = (float *)malloc((size_t)k * sizeof(float));
  if (!index || !weight || !cell_index || !cell_weight) {
    free(index);
    free(weight);
    k = -1;
    goto out;
  }
  for (int d = 0; d < dsize; d++) {
    int n = area_cell(ssize, scale, d, cell_index, cell_weight);
    for (int j = 0; j < k; j++) { /* padding: last tap again, weight 0 */
      index[(size_t)j * dsize + d] = cell_index[j < n ? j : n - 1];
      weight[(size_t)j * dsize + d] = j < n ? cell_weight[j] : 0.0f;
    }
  }
  *index_out = index;
  *weight_out = weight;
out:
  free(cell_index);
  free(cell_weight);
  return k;
}

void shmatari_resize_plan_free(shmatari_resize_plan *plan) {
  free(plan->x_index);
  free(plan->x_weight);
  free(plan->y_index);
  free(plan->y_weight);
  free(plan->hbuf);
  free(plan->hmap);
  free(plan->rowf);
  free(plan->acc);
  free(plan->pooled);
  memset(plan, 0, sizeof(*plan));
}

int shmatari_resize_plan_init(shmatari_resize_plan *plan, int src_h, int src_w,
                              int dst_h, int dst_w, int channels) {
  memset(plan, 0, sizeof(*plan));
  if (src_h < 1 || src_w < 1 || dst_h < 1 || dst_w < 1 || dst_h > src_h ||
      dst_w > src_w || (channels != 1 && channels != 3))
    return SHMATARI_KERNEL_EINVAL;
  plan->src_h = src_h;
  plan->src_w = src_w;
  plan->dst_h = dst_h;
  plan->dst_w = dst_w;
  plan->channels = channels;
  plan->pooled = (uint8_t *)malloc((size_t)src_h * src_w * channels);
  if (!plan->pooled) goto nomem;

  if (src_h == dst_h && src_w == dst_w) {
    plan->mode = SHMATARI_RESIZE_COPY;
    return SHMATARI_KERNEL_OK;
  }
  /* OpenCV takes the block path when both scales are integers to within
   * DBL_EPSILON (cv::resize, is_area_fast). */
  double sx = area_scale(src_w, dst_w), sy = area_scale(src_h, dst_h);
  int isx = (int)lrint(sx), isy = (int)lrint(sy);
  if (fabs(sx - isx) < DBL_EPSILON && fabs(sy - isy) < DBL_EPSILON &&
      (long)dst_w * isx <= src_w && (long)dst_h * isy <= src_h) {
    plan->scale_x = isx;
    plan->scale_y = isy;
    plan->inv_area = 1.0f / (float)(isx * isy);
    plan->mode = (isx == 2 && isy == 2) ? SHMATARI_RESIZE_FAST_2X2
                                        : SHMATARI_RESIZE_FAST_INT;
    return SHMATARI_KERNEL_OK;
  }
  plan->mode = SHMATARI_RESIZE_AREA;
  plan->kx = area_table(src_w, dst_w, &plan->x_index, &plan->x_weight);
  plan->ky = area_table(src_h, dst_h, &plan->y_index, &plan->y_weight);
  plan->hbuf =
      (float *)malloc((size_t)src_h * dst_w * channels * sizeof(float));
  plan->hmap = (int32_t *)malloc((size_t)src_h * sizeof(int32_t));
  plan->rowf = (float *)malloc((size_t)src_w * channels * sizeof(float));
  plan->acc = (float *)malloc((size_t)dst_w * channels * sizeof(float));
  if (plan->kx < 0 || plan->ky < 0 || !plan->hbuf || !plan->hmap ||
      !plan->rowf || !plan->acc)
    goto nomem;
  return SHMATARI_KERNEL_OK;

nomem:
  shmatari_resize_plan_free(plan);
  return SHMATARI_KERNEL_ENOMEM;
}

static inline uint8_t saturate_u8(float v) {
  long r = lrintf(v); /* round half to even, like cvRound */
  return (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
}

/* saturate_u8 for sums known to lie in [-2^22, 2^22]: adding and removing
 * 1.5 * 2^23 rounds half to even in the default rounding mode, and unlike
 * lrintf it vectorises. */
static inline uint8_t saturate_u8_small(float v) {
  const float magic = 12582912.0f;
  float r = (v + magic) - magic;
  r = r < 0.0f ? 0.0f : r;
  r = r > 255.0f ? 255.0f : r;
  return (uint8_t)(int)r;
}

/* Horizontal pass of one row (uint8, src_w * channels) into h. */
static inline void area_hpass(const shmatari_resize_plan *p,
                              const uint8_t *restrict row, float *restrict h) {
  const int w = p->dst_w, kx = p->kx, cn = p->channels;
  float *restrict rowf = p->rowf;
  for (int i = 0; i < p->src_w * cn; i++) rowf[i] = (float)row[i];
  if (cn == 1) {
    for (int dx = 0; dx < w; dx++) h[dx] = 0.0f;
    for (int k = 0; k < kx; k++) {
      const int32_t *restrict ix = p->x_index + (size_t)k * w;
      const float *restrict wx = p->x_weight + (size_t)k * w;
      for (int dx = 0; dx < w; dx++) h[dx] += rowf[ix[dx]] * wx[dx];
    }
    return;
  }
  for (int i = 0; i < w * cn; i++) h[i] = 0.0f;
  for (int k = 0; k < kx; k++) {
    const int32_t *restrict ix = p->x_index + (size_t)k * w;
    const float *restrict wx = p->x_weight + (size_t)k * w;
    for (int dx = 0; dx < w; dx++)
      for (int c = 0; c < cn; c++)
        h[dx * cn + c] += rowf[ix[dx] * cn + c] * wx[dx];
  }
}

/* Vertical pass: every output row from the row sums (through hmap). */
static inline void area_vpass(const shmatari_resize_plan *p, uint8_t *dst,
                              ptrdiff_t dst_stride) {
  const int n = p->dst_w * p->channels, ky = p->ky, h = p->dst_h;
  float *restrict acc = p->acc;
  for (int dy = 0; dy < h; dy++) {
    for (int i = 0; i < n; i++) acc[i] = 0.0f;
    for (int k = 0; k < ky; k++) {
      const float w = p->y_weight[(size_t)k * h + dy];
      const float *restrict s =
          p->hbuf + (size_t)p->hmap[p->y_index[(size_t)k * h + dy]] * n;
      for (int i = 0; i < n; i++) acc[i] += w * s[i];
    }
    uint8_t *restrict out = dst + dy * dst_stride;
    if (!p->planar) {
      for (int i = 0; i < n; i++) out[i] = saturate_u8_small(acc[i]);
      continue;
    }
    const int cn = p->channels, w = p->dst_w;
    const ptrdiff_t plane = (ptrdiff_t)h * dst_stride;
    for (int c = 0; c < cn; c++)
      for (int x = 0; x < w; x++)
        out[c * plane + x] = saturate_u8_small(acc[x * cn + c]);
  }
}

/* Integer-scale block averages (OpenCV's resizeAreaFast_). */
static void fast_resize(const shmatari_resize_plan *p, const uint8_t *src,
                        ptrdiff_t src_stride, uint8_t *dst,
                        ptrdiff_t dst_stride) {
  const int cn = p->channels, sx = p->scale_x, sy = p->scale_y;
  /* element (x, c) of an output row: interleaved x * cn + c, planar
   * c * plane + x */
  const ptrdiff_t xs = p->planar ? 1 : cn;
  const ptrdiff_t cs = p->planar ? (ptrdiff_t)p->dst_h * dst_stride : 1;
  for (int dy = 0; dy < p->dst_h; dy++) {
    uint8_t *out = dst + dy * dst_stride;
    const uint8_t *top = src + (ptrdiff_t)dy * sy * src_stride;
    for (int dx = 0; dx < p->dst_w; dx++) {
      for (int c = 0; c < cn; c++) {
        int sum = 0;
        for (int y = 0; y < sy; y++) {
          const uint8_t *s = top + y * src_stride + ((size_t)dx * sx) * cn + c;
          for (int x = 0; x < sx; x++) sum += s[(size_t)x * cn];
        }
        if (p->mode == SHMATARI_RESIZE_FAST_2X2)
          out[dx * xs + c * cs] = (uint8_t)((sum + 2) >> 2);
        else
          out[dx * xs + c * cs] = saturate_u8((float)sum * p->inv_area);
      }
    }
  }
}

SHMATARI_HOT
void shmatari_resize_u8(shmatari_resize_plan *p, const uint8_t *src,
                        ptrdiff_t src_stride, uint8_t *dst,
                        ptrdiff_t dst_stride) {
  const size_t row_bytes = (size_t)p->src_w * p->channels;
  switch (p->mode) {
    case SHMATARI_RESIZE_COPY:
      if (!p->planar || p->channels == 1) {
        for (int y = 0; y < p->dst_h; y++)
          memcpy(dst + y * dst_stride, src + y * src_stride, row_bytes);
        return;
      }
      for (int y = 0; y < p->dst_h; y++)
        for (int c = 0; c < p->channels; c++)
          for (int x = 0; x < p->dst_w; x++)
            dst[(ptrdiff_t)c * p->dst_h * dst_stride + y * dst_stride + x] =
                src[y * src_stride + (ptrdiff_t)x * p->channels + c];
      return;
    case SHMATARI_RESIZE_FAST_2X2:
    case SHMATARI_RESIZE_FAST_INT:
      fast_resize(p, src, src_stride, dst, dst_stride);
      return;
    default: {
      const size_t n = (size_t)p->dst_w * p->channels;
      for (int y = 0; y < p->src_h; y++) {
        const uint8_t *row = src + y * src_stride;
        if (y > 0 && memcmp(row, row - src_stride, row_bytes) == 0) {
          p->hmap[y] = p->hmap[y - 1];
          continue;
        }
        p->hmap[y] = y;
        area_hpass(p, row, p->hbuf + y * n);
      }
      area_vpass(p, dst, dst_stride);
    }
  }
}

/* One pooled row: out[x*cn + c] = max(lut[a[x]*cn + c], lut[b[x]*cn + c]).
 * b may be NULL (no pooling); when a row of b equals a's, one lookup does. */
static inline void pool_row(const uint8_t *a, const uint8_t *b,
                            const uint8_t *lut, int width, int cn,
                            uint8_t *restrict out) {
  if (b && memcmp(a, b, (size_t)width) == 0) b = NULL;
  if (cn == 1) {
    if (b) {
      for (int x = 0; x < width; x++) {
        uint8_t u = lut[a[x]], v = lut[b[x]];
        out[x] = u > v ? u : v;
      }
    } else {
      for (int x = 0; x < width; x++) out[x] = lut[a[x]];
    }
    return;
  }
  for (int x = 0; x < width; x++) {
    const uint8_t *u = lut + (size_t)a[x] * cn;
    const uint8_t *v = b ? lut + (size_t)b[x] * cn : u;
    for (int c = 0; c < cn; c++) out[x * cn + c] = u[c] > v[c] ? u[c] : v[c];
  }
}

SHMATARI_HOT
void shmatari_frame(shmatari_resize_plan *p, const uint8_t *a,
                    const uint8_t *b, const uint8_t *lut, uint8_t *dst,
                    ptrdiff_t dst_stride) {
  const int w = p->src_w, cn = p->channels;
  const size_t row_bytes = (size_t)w * cn;
  if (p->mode == SHMATARI_RESIZE_AREA) {
    /* Fused: pool a row, fold it into the row sums at once, and reuse the
     * sums of the row above when both raw rows repeat it. */
    const size_t n = (size_t)p->dst_w * cn;
    for (int y = 0; y < p->src_h; y++) {
      const uint8_t *ra = a + (size_t)y * w, *rb = b ? b + (size_t)y * w : NULL;
      if (y > 0 && memcmp(ra, ra - w, (size_t)w) == 0 &&
          (!rb || memcmp(rb, rb - w, (size_t)w) == 0)) {
        p->hmap[y] = p->hmap[y - 1];
        continue;
      }
      p->hmap[y] = y;
      pool_row(ra, rb, lut, w, cn, p->pooled);
      area_hpass(p, p->pooled, p->hbuf + y * n);
    }
    area_vpass(p, dst, dst_stride);
    return;
  }
  /* Copy and block modes: pool the whole frame, then resize it. */
  for (int y = 0; y < p->src_h; y++) {
    const size_t off = (size_t)y * w;
    pool_row(a + off, b ? b + off : NULL, lut, w, cn, p->pooled + off * cn);
  }
  shmatari_resize_u8(p, p->pooled, (ptrdiff_t)row_bytes, dst, dst_stride);
}

SHMATARI_HOT
int shmatari_has_unknown(const uint8_t *frame, const uint8_t *checked,
                         int height, int width, const uint8_t known[256]) {
  for (int y = 0; y < height; y++) {
    const size_t off = (size_t)y * width;
    const uint8_t *row = frame + off;
    if (y > 0 && memcmp(row, row - width, (size_t)width) == 0) continue;
    if (checked && memcmp(row, checked + off, (size_t)width) == 0) continue;
    uint8_t all = 1;
    for (int x = 0; x < width; x++) all &= known[row[x]];
    if (!all) return 1;
  }
  return 0;
}

void shmatari_learn_palette(const uint8_t *frame, const uint8_t *converted,
                            size_t n, int channels, uint8_t *lut,
                            uint8_t known[256]) {
  for (size_t i = 0; i < n; i++) {
    const uint8_t index = frame[i];
    for (int c = 0; c < channels; c++)
      lut[(size_t)index * channels + c] = converted[i * channels + c];
    known[index] = 1;
  }
}
