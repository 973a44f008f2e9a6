/*
 * shmatari frame kernel: palette lookup, max-pool and area resize in one pass.
 *
 * The resize reproduces OpenCV's cv::resize(..., INTER_AREA) for uint8
 * downscales bit for bit:
 *   - same size: a copy;
 *   - integer scale factors in both axes ("area fast" path): the block sum,
 *     rounded half up for 2x2 blocks ((sum + 2) >> 2) and otherwise
 *     multiplied by the float32 1/area and rounded half to even;
 *   - any other downscale: float32 weights computed as OpenCV's area table
 *     does, accumulated per source row (left to right), then per output row
 *     (top to bottom), rounded half to even and saturated to [0, 255].
 * Upscales (a destination larger than the source in either axis) are not
 * supported: OpenCV switches to bilinear interpolation there.
 *
 * This file must be compiled without floating-point contraction
 * (-ffp-contract=off): a fused multiply-add would round differently.
 */
#ifndef SHMATARI_KERNEL_H
#define SHMATARI_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum shmatari_resize_mode {
  SHMATARI_RESIZE_COPY = 0,     /* same size */
  SHMATARI_RESIZE_FAST_2X2 = 1, /* integer scale 2 x 2: (sum + 2) >> 2 */
  SHMATARI_RESIZE_FAST_INT = 2, /* other integer scales: rint(sum * (1/area)) */
  SHMATARI_RESIZE_AREA = 3      /* general area weights */
};

/* Error codes returned by shmatari_resize_plan_init. */
#define SHMATARI_KERNEL_OK 0
#define SHMATARI_KERNEL_EINVAL (-1) /* a size is < 1, or an upscale was asked */
#define SHMATARI_KERNEL_ENOMEM (-2)

typedef struct shmatari_resize_plan {
  int32_t src_h, src_w; /* source size, pixels */
  int32_t dst_h, dst_w; /* destination size, pixels */
  int32_t channels;     /* interleaved channels per pixel: 1 or 3 */
  int32_t mode;         /* enum shmatari_resize_mode */
  int32_t scale_x, scale_y; /* integer scales (FAST_* modes only) */
  float inv_area;           /* float32(1.0 / (scale_x * scale_y)), FAST_INT */
  int32_t kx, ky;           /* taps per output column / row (AREA mode) */
  int32_t *x_index;         /* [kx * dst_w] source column of tap k of column d
                               at [k * dst_w + d] */
  float *x_weight;          /* [kx * dst_w] its weight, 0 for padding taps */
  int32_t *y_index;         /* [ky * dst_h] source row of each tap */
  float *y_weight;          /* [ky * dst_h] */
  float *hbuf;              /* scratch: [src_h * dst_w * channels] row sums */
  int32_t *hmap;            /* scratch: [src_h] hbuf row holding row y's sums */
  float *rowf;              /* scratch: [src_w * channels] one row as floats */
  float *acc;               /* scratch: [dst_w * channels] one output row */
  uint8_t *pooled;          /* scratch: [src_h * src_w * channels] */
  int32_t planar;           /* 0 (what _init sets): dst is interleaved,
                               [dst_h][dst_w][channels]; 1: dst is planar,
                               [channels][dst_h][dst_w], each plane's rows at
                               dst_stride bytes and plane c at
                               c * dst_h * dst_stride. Set it after _init.
                               The values are the same either way. */
} shmatari_resize_plan;

/* Builds a plan. Returns SHMATARI_KERNEL_OK, or an error code with the plan
 * left empty (safe to free). */
int shmatari_resize_plan_init(shmatari_resize_plan *plan, int src_h, int src_w,
                              int dst_h, int dst_w, int channels);
void shmatari_resize_plan_free(shmatari_resize_plan *plan);

/* Resizes one uint8 image, rows of src_w * channels bytes at src_stride,
 * into dst (rows at dst_stride bytes). Bit-identical to cv2.resize with
 * INTER_AREA. */
void shmatari_resize_u8(shmatari_resize_plan *plan, const uint8_t *src,
                        ptrdiff_t src_stride, uint8_t *dst,
                        ptrdiff_t dst_stride);

/* The fused frame kernel. a and b are raw ALE screens of palette indices
 * (src_h x src_w bytes, contiguous). b may be NULL (no max-pool). Each pixel
 * becomes max(lut(a), lut(b)), channel by channel, where lut maps a palette
 * index to `channels` bytes (lut[index * channels + c]); the pooled frame is
 * then resized into dst as shmatari_resize_u8 does. */
void shmatari_frame(shmatari_resize_plan *plan, const uint8_t *a,
                    const uint8_t *b, const uint8_t *lut, uint8_t *dst,
                    ptrdiff_t dst_stride);

/* Palette learning. ALE's getScreen gives palette indices cheaply; its own
 * conversion to grayscale or RGB is what observations must match. A worker
 * keeps a table lut[index * channels + c] with known[index] != 0 for each
 * index it has seen converted, and fills it from ALE's conversion whenever a
 * frame holds an index it has not seen. */

/* Returns 1 if any pixel of a height x width frame of palette indices has
 * known[index] == 0, else 0. Rows equal to the row above, or to the same row
 * of `checked` (an earlier frame already checked, or NULL), are skipped. */
int shmatari_has_unknown(const uint8_t *frame, const uint8_t *checked,
                         int height, int width, const uint8_t known[256]);

/* Records lut[frame[i] * channels + c] = converted[i * channels + c] and
 * known[frame[i]] = 1 for the n pixels of a frame and its conversion. */
void shmatari_learn_palette(const uint8_t *frame, const uint8_t *converted,
                            size_t n, int channels, uint8_t *lut,
                            uint8_t known[256]);

#ifdef __cplusplus
}
#endif

#endif /* SHMATARI_KERNEL_H */
