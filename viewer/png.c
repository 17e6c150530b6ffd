// PNG writer: signature, IHDR, one IDAT (zlib stream of filtered rows), IEND. Each row gets the
// filter (None, Sub, Up, Average, Paeth) with the smallest sum of absolute residuals, the usual
// heuristic: rendered scenes have smooth gradients, which then leave small residuals that
// compress far better than unfiltered rows.
#include "png.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

static void put32(unsigned char* p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

// length, type, data, CRC over type and data
static int write_chunk(FILE* f, const char type[4], const unsigned char* data, uint32_t len) {
  unsigned char head[8], tail[4];
  put32(head, len);
  memcpy(head + 4, type, 4);
  uLong crc = crc32(0L, (const Bytef*)type, 4);
  if (len) crc = crc32(crc, data, len);
  put32(tail, (uint32_t)crc);
  return fwrite(head, 1, 8, f) != 8 || (len && fwrite(data, 1, len, f) != len) ||
         fwrite(tail, 1, 4, f) != 4;
}

static int paeth(int a, int b, int c) {
  int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
  if (pa <= pb && pa <= pc) return a;
  return pb <= pc ? b : c;
}

// Filters one row (n bytes, 3 bytes per pixel) with filter type t into out; prev is the row above
// (NULL for the first row). Returns the sum of |residual| as signed bytes.
static long filter_row(int t, const unsigned char* row, const unsigned char* prev, int n,
                       unsigned char* out) {
  long cost = 0;
  for (int i = 0; i < n; i++) {
    int a = i >= 3 ? row[i - 3] : 0, b = prev ? prev[i] : 0, c = (prev && i >= 3) ? prev[i - 3] : 0;
    int pred = t == 0 ? 0 : t == 1 ? a : t == 2 ? b : t == 3 ? (a + b) / 2 : paeth(a, b, c);
    unsigned char r = (unsigned char)(row[i] - pred);
    out[i] = r;
    cost += r < 128 ? r : 256 - r;
  }
  return cost;
}

int cfv_png_write(const char* path, const unsigned char* rgb, int width, int height, int flip_rows,
                  char* err, int err_size) {
  if (width <= 0 || height <= 0 || width > (1 << 24) / 3) {
    snprintf(err, err_size, "png '%s': bad size %dx%d", path, width, height);
    return 1;
  }
  size_t stride = (size_t)width * 3, raw_size = (stride + 1) * (size_t)height;
  unsigned char* raw = malloc(raw_size);
  unsigned char* trial = malloc(stride);
  uLongf zsize = compressBound((uLong)raw_size);
  unsigned char* z = malloc(zsize);
  int status = 1;
  FILE* f = NULL;
  if (!raw || !trial || !z) {
    snprintf(err, err_size, "png '%s': out of memory", path);
    goto done;
  }

  for (int y = 0; y < height; y++) {
    int src_y = flip_rows ? height - 1 - y : y, prev_y = flip_rows ? src_y + 1 : src_y - 1;
    const unsigned char* row = rgb + (size_t)src_y * stride;
    const unsigned char* prev = y > 0 ? rgb + (size_t)prev_y * stride : NULL;
    unsigned char* out = raw + (size_t)y * (stride + 1);
    long best = -1;
    for (int t = 0; t < 5; t++) {
      long cost = filter_row(t, row, prev, (int)stride, trial);
      if (best < 0 || cost < best) {
        best = cost;
        out[0] = (unsigned char)t;
        memcpy(out + 1, trial, stride);
      }
    }
  }
  if (compress2(z, &zsize, raw, (uLong)raw_size, 9) != Z_OK) {
    snprintf(err, err_size, "png '%s': zlib compression failed", path);
    goto done;
  }

  f = fopen(path, "wb");
  if (!f) {
    snprintf(err, err_size, "png '%s': %s", path, strerror(errno));
    goto done;
  }
  static const unsigned char signature[8] = {137, 'P', 'N', 'G', 13, 10, 26, 10};
  unsigned char ihdr[13];
  put32(ihdr, (uint32_t)width);
  put32(ihdr + 4, (uint32_t)height);
  ihdr[8] = 8;   // bits per channel
  ihdr[9] = 2;   // colour type: RGB
  ihdr[10] = 0;  // deflate
  ihdr[11] = 0;  // adaptive filtering
  ihdr[12] = 0;  // no interlace
  int bad = fwrite(signature, 1, 8, f) != 8 || write_chunk(f, "IHDR", ihdr, 13) ||
            write_chunk(f, "IDAT", z, (uint32_t)zsize) || write_chunk(f, "IEND", NULL, 0);
  if (fclose(f) || bad) {
    snprintf(err, err_size, "png '%s': write failed: %s", path, strerror(errno));
    goto done;
  }
  status = 0;

done:
  free(raw);
  free(trial);
  free(z);
  return status;
}
