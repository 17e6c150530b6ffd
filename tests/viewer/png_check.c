// png_check: checks chainfd-view's PNG frames with a decoder written independently of its writer.
//
//   png_check A.png [B.png] [--size WxH] [--min-changed F] [--max-changed G]
//
// A must decode (signature, chunk CRCs, zlib stream, all five row filters), have the given size,
// and not be blank: at least a fraction F of its pixels differ from its most common colour
// (colours binned to 4 bits a channel). With B (the same scene drawn without the moving bodies):
// at least a fraction F of the pixels differ by more than 24 levels summed over R, G and B, i.e.
// the chain is in the picture. F defaults to 0.001 (300 pixels of 640x480: a thin chain seen
// whole covers 0.2-0.5 %). With --max-changed G, B is the same scene drawn another way that must
// look the same: at most a fraction G of the pixels differ so (and no lower bound). Exit 0 when
// every check passes, 1 otherwise.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

typedef struct image {
  int width, height;
  unsigned char* rgb;  // width * height * 3, rows top to bottom
} image;

static uint32_t get32(const unsigned char* p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int fail(const char* path, const char* why) {
  fprintf(stderr, "png_check: %s: %s\n", path, why);
  return 1;
}

static int paeth(int a, int b, int c) {
  int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
  return (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
}

static int load(const char* path, image* img) {
  FILE* f = fopen(path, "rb");
  if (!f) return fail(path, "cannot open");
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* buf = malloc(size > 0 ? (size_t)size : 1);
  if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
    fclose(f);
    free(buf);
    return fail(path, "cannot read");
  }
  fclose(f);

  static const unsigned char sig[8] = {137, 'P', 'N', 'G', 13, 10, 26, 10};
  int status = 1, channels = 0;
  unsigned char* idat = NULL;
  unsigned char* raw = NULL;
  size_t idat_len = 0;
  if (size < 8 || memcmp(buf, sig, 8)) {
    fail(path, "not a PNG (signature)");
    goto done;
  }
  for (long pos = 8; pos + 12 <= size;) {
    uint32_t len = get32(buf + pos);
    if ((long)len > size - pos - 12) {
      fail(path, "truncated chunk");
      goto done;
    }
    const unsigned char* type = buf + pos + 4;
    const unsigned char* data = buf + pos + 8;
    if ((uint32_t)crc32(crc32(0, type, 4), data, len) != get32(data + len)) {
      fail(path, "chunk CRC mismatch");
      goto done;
    }
    if (!memcmp(type, "IHDR", 4)) {
      img->width = (int)get32(data);
      img->height = (int)get32(data + 4);
      if (data[8] != 8 || (data[9] != 2 && data[9] != 6) || data[12] != 0) {
        fail(path, "only 8-bit RGB/RGBA without interlace is checked");
        goto done;
      }
      channels = data[9] == 2 ? 3 : 4;
    } else if (!memcmp(type, "IDAT", 4)) {
      unsigned char* grown = realloc(idat, idat_len + len + 1);
      if (!grown) goto done;
      idat = grown;
      memcpy(idat + idat_len, data, len);
      idat_len += len;
    } else if (!memcmp(type, "IEND", 4)) {
      break;
    }
    pos += 12 + (long)len;
  }
  if (!channels || img->width <= 0 || img->height <= 0 || !idat) {
    fail(path, "missing IHDR or IDAT");
    goto done;
  }

  size_t stride = (size_t)img->width * channels;
  uLongf raw_len = (uLongf)((stride + 1) * img->height);
  raw = malloc(raw_len);
  img->rgb = malloc((size_t)img->width * img->height * 3);
  unsigned char* cur = malloc(stride);
  unsigned char* prev = calloc(stride, 1);
  if (!raw || !img->rgb || !cur || !prev) {
    free(cur);
    free(prev);
    goto done;
  }
  uLongf got = raw_len;
  if (uncompress(raw, &got, idat, (uLong)idat_len) != Z_OK || got != raw_len) {
    free(cur);
    free(prev);
    fail(path, "bad zlib stream or wrong data size");
    goto done;
  }
  int ok = 1;
  for (int y = 0; y < img->height && ok; y++) {
    const unsigned char* in = raw + (size_t)y * (stride + 1);
    int filter = in[0];
    for (size_t i = 0; i < stride; i++) {
      int a = i >= (size_t)channels ? cur[i - channels] : 0, b = prev[i];
      int c = i >= (size_t)channels ? prev[i - channels] : 0, p;
      switch (filter) {
        case 0: p = 0; break;
        case 1: p = a; break;
        case 2: p = b; break;
        case 3: p = (a + b) / 2; break;
        case 4: p = paeth(a, b, c); break;
        default: ok = 0; p = 0;
      }
      cur[i] = (unsigned char)(in[1 + i] + p);
    }
    for (int x = 0; x < img->width; x++)
      memcpy(img->rgb + ((size_t)y * img->width + x) * 3, cur + (size_t)x * channels, 3);
    memcpy(prev, cur, stride);
  }
  free(cur);
  free(prev);
  if (!ok) {
    fail(path, "unknown row filter");
    goto done;
  }
  status = 0;

done:
  free(buf);
  free(idat);
  free(raw);
  return status;
}

int main(int argc, char** argv) {
  const char *a_path = NULL, *b_path = NULL;
  int want_w = 0, want_h = 0;
  double min_changed = 0.001, max_changed = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--size") && i + 1 < argc) sscanf(argv[++i], "%dx%d", &want_w, &want_h);
    else if (!strcmp(argv[i], "--min-changed") && i + 1 < argc) min_changed = atof(argv[++i]);
    else if (!strcmp(argv[i], "--max-changed") && i + 1 < argc) max_changed = atof(argv[++i]);
    else if (!a_path) a_path = argv[i];
    else if (!b_path) b_path = argv[i];
    else {
      fprintf(stderr, "usage: png_check A.png [B.png] [--size WxH] [--min-changed F] [--max-changed G]\n");
      return 2;
    }
  }
  if (!a_path) return 2;

  image a = {0}, b = {0};
  if (load(a_path, &a)) return 1;
  int status = 0;
  if (want_w && (a.width != want_w || a.height != want_h)) {
    fprintf(stderr, "png_check: %s is %dx%d, expected %dx%d\n", a_path, a.width, a.height, want_w,
            want_h);
    status = 1;
  }
  size_t n = (size_t)a.width * a.height;
  static size_t hist[4096];
  for (size_t i = 0; i < 3 * n; i += 3)
    hist[(a.rgb[i] >> 4) << 8 | (a.rgb[i + 1] >> 4) << 4 | a.rgb[i + 2] >> 4]++;
  size_t mode = 0;
  for (size_t c = 1; c < 4096; c++)
    if (hist[c] > hist[mode]) mode = c;
  double varied = 1.0 - (double)hist[mode] / n;
  printf("%s: %dx%d, %.2f%% of the pixels differ from the most common colour\n", a_path, a.width,
         a.height, 100 * varied);
  if (varied < min_changed) {
    fprintf(stderr, "png_check: %s looks blank (%.3f%% of the pixels differ from the most common "
                    "colour, expected at least %.3f%%)\n", a_path, 100 * varied, 100 * min_changed);
    status = 1;
  }

  if (b_path) {
    if (load(b_path, &b)) {
      status = 1;
    } else if (b.width != a.width || b.height != a.height) {
      fprintf(stderr, "png_check: %s and %s differ in size\n", a_path, b_path);
      status = 1;
    } else {
      size_t changed = 0;
      for (size_t i = 0; i < 3 * n; i += 3) {
        int d = abs(a.rgb[i] - b.rgb[i]) + abs(a.rgb[i + 1] - b.rgb[i + 1]) +
                abs(a.rgb[i + 2] - b.rgb[i + 2]);
        changed += d > 24;
      }
      double frac = (double)changed / n;
      printf("%s vs %s: %.2f%% of the pixels differ\n", a_path, b_path, 100 * frac);
      if (max_changed >= 0) {
        if (frac > max_changed) {
          fprintf(stderr, "png_check: %.3f%% of the pixels differ, expected at most %.3f%%\n",
                  100 * frac, 100 * max_changed);
          status = 1;
        }
      } else if (frac < min_changed) {
        fprintf(stderr, "png_check: the moving bodies cover %.3f%% of the picture, expected at least "
                        "%.3f%%\n", 100 * frac, 100 * min_changed);
        status = 1;
      }
    }
  }
  free(a.rgb);
  free(b.rgb);
  return status;
}
