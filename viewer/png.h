// png.h: a minimal PNG writer (8-bit RGB, no interlace) over zlib's deflate, so that screenshots
// and headless frames need no image library.
#ifndef CHAINFD_VIEWER_PNG_H
#define CHAINFD_VIEWER_PNG_H

// Writes width x height RGB pixels, rows top to bottom (flip_rows = 1: rows bottom to top, as
// OpenGL reads them). 0 on success; otherwise nonzero with a message in err.
int cfv_png_write(const char* path, const unsigned char* rgb, int width, int height, int flip_rows,
                  char* err, int err_size);

#endif  // CHAINFD_VIEWER_PNG_H
