// A window-less OpenGL context through EGL, for headless frames on machines with no X server.
#ifndef CHAINFD_VIEWER_EGL_H
#define CHAINFD_VIEWER_EGL_H

// Makes a desktop OpenGL context current on the first EGL device that takes one (else the default
// display). 0, with "EGL x.y, vendor" in err; 1 with the reason in err.
int cfv_egl_make_current(char* err, int size);

// Releases the context made by cfv_egl_make_current (nothing when there is none).
void cfv_egl_release(void);

#endif  // CHAINFD_VIEWER_EGL_H
