// An OpenGL context with no window system, through EGL: headless frames on a GPU server (NVIDIA's
// EGL driver) or in software (Mesa). libEGL is opened at run time, globally, so that MuJoCo's GL
// loader finds eglGetProcAddress in the process; a viewer built without EGL headers, or run where
// libEGL.so.1 is missing, says so and the GLFW path still works.
#include "egl.h"

#include <stdio.h>

#ifdef CFV_HAVE_EGL
#include <dlfcn.h>

#include <EGL/egl.h>
#include <EGL/eglext.h>

static struct {
  void* lib;
  EGLDisplay display;
  EGLContext context;
  EGLSurface surface;
  PFNEGLTERMINATEPROC terminate;
  PFNEGLDESTROYCONTEXTPROC destroy_context;
  PFNEGLDESTROYSURFACEPROC destroy_surface;
  PFNEGLMAKECURRENTPROC make_current;
} egl;

#define LOAD(type, name)                                                                      \
  type name = (type)dlsym(egl.lib, #name);                                                    \
  if (!name) {                                                                                \
    snprintf(err, size, "libEGL.so.1 has no %s", #name);                                      \
    return 1;                                                                                 \
  }

int cfv_egl_make_current(char* err, int size) {
  egl.lib = dlopen("libEGL.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!egl.lib) {
    snprintf(err, size, "cannot open libEGL.so.1 (%s)", dlerror());
    return 1;
  }
  LOAD(PFNEGLGETPROCADDRESSPROC, eglGetProcAddress);
  LOAD(PFNEGLGETDISPLAYPROC, eglGetDisplay);
  LOAD(PFNEGLINITIALIZEPROC, eglInitialize);
  LOAD(PFNEGLCHOOSECONFIGPROC, eglChooseConfig);
  LOAD(PFNEGLBINDAPIPROC, eglBindAPI);
  LOAD(PFNEGLCREATECONTEXTPROC, eglCreateContext);
  LOAD(PFNEGLCREATEPBUFFERSURFACEPROC, eglCreatePbufferSurface);
  LOAD(PFNEGLGETERRORPROC, eglGetError);
  LOAD(PFNEGLQUERYSTRINGPROC, eglQueryString);
  LOAD(PFNEGLTERMINATEPROC, eglTerminate);
  LOAD(PFNEGLDESTROYCONTEXTPROC, eglDestroyContext);
  LOAD(PFNEGLDESTROYSURFACEPROC, eglDestroySurface);
  LOAD(PFNEGLMAKECURRENTPROC, eglMakeCurrent);
  egl.terminate = eglTerminate;
  egl.destroy_context = eglDestroyContext;
  egl.destroy_surface = eglDestroySurface;
  egl.make_current = eglMakeCurrent;

  // a device's own display first (a GPU server has no other), then the default display; the
  // first that gives an RGBA8 / depth 24 / stencil 8 desktop OpenGL context current
  PFNEGLQUERYDEVICESEXTPROC query_devices =
      (PFNEGLQUERYDEVICESEXTPROC)eglGetProcAddress("eglQueryDevicesEXT");
  PFNEGLGETPLATFORMDISPLAYEXTPROC platform_display =
      (PFNEGLGETPLATFORMDISPLAYEXTPROC)eglGetProcAddress("eglGetPlatformDisplayEXT");
  EGLDeviceEXT devices[16];
  EGLint ndevice = 0;
  if (!query_devices || !platform_display || !query_devices(16, devices, &ndevice)) ndevice = 0;
  const EGLint config_attributes[] = {EGL_SURFACE_TYPE, EGL_PBUFFER_BIT,
                                      EGL_RENDERABLE_TYPE, EGL_OPENGL_BIT,
                                      EGL_RED_SIZE, 8, EGL_GREEN_SIZE, 8, EGL_BLUE_SIZE, 8,
                                      EGL_ALPHA_SIZE, 8, EGL_DEPTH_SIZE, 24, EGL_STENCIL_SIZE, 8,
                                      EGL_NONE};
  const EGLint pbuffer_attributes[] = {EGL_WIDTH, 64, EGL_HEIGHT, 64, EGL_NONE};
  const char* why = "no EGL display";
  EGLint major = 0, minor = 0;
  for (int i = 0; i <= ndevice; i++) {
    egl.display = i < ndevice ? platform_display(EGL_PLATFORM_DEVICE_EXT, devices[i], NULL)
                              : eglGetDisplay(EGL_DEFAULT_DISPLAY);
    if (egl.display == EGL_NO_DISPLAY) continue;
    if (!eglInitialize(egl.display, &major, &minor)) {
      egl.display = EGL_NO_DISPLAY;
      continue;
    }
    EGLConfig config;
    EGLint nconfig = 0;
    if (!eglChooseConfig(egl.display, config_attributes, &config, 1, &nconfig) || nconfig < 1) {
      why = "no RGBA8 / depth 24 / stencil 8 OpenGL configuration";
    } else if (!eglBindAPI(EGL_OPENGL_API) ||
               (egl.context = eglCreateContext(egl.display, config, EGL_NO_CONTEXT, NULL)) ==
                   EGL_NO_CONTEXT) {
      why = "cannot create a desktop OpenGL context";
    } else if (eglMakeCurrent(egl.display, EGL_NO_SURFACE, EGL_NO_SURFACE, egl.context)) {
      break;  // MuJoCo draws into its own offscreen framebuffer: no surface needed
    } else if ((egl.surface = eglCreatePbufferSurface(egl.display, config, pbuffer_attributes)) !=
                   EGL_NO_SURFACE &&
               eglMakeCurrent(egl.display, egl.surface, egl.surface, egl.context)) {
      break;  // where the driver wants a surface: a small pbuffer
    } else {
      why = "cannot make the context current";
    }
    cfv_egl_release();
  }
  if (egl.display == EGL_NO_DISPLAY) {
    snprintf(err, size, "%s (%d EGL devices; EGL error 0x%x)", why, (int)ndevice,
             (unsigned)eglGetError());
    return 1;
  }
  const char* vendor = eglQueryString(egl.display, EGL_VENDOR);
  snprintf(err, size, "EGL %d.%d, %s", (int)major, (int)minor, vendor ? vendor : "unknown vendor");
  return 0;
}

void cfv_egl_release(void) {
  if (egl.display != EGL_NO_DISPLAY && egl.make_current) {
    egl.make_current(egl.display, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
    if (egl.context != EGL_NO_CONTEXT) egl.destroy_context(egl.display, egl.context);
    if (egl.surface != EGL_NO_SURFACE) egl.destroy_surface(egl.display, egl.surface);
    egl.terminate(egl.display);
  }
  egl.display = EGL_NO_DISPLAY;
  egl.context = EGL_NO_CONTEXT;
  egl.surface = EGL_NO_SURFACE;
  // libEGL stays loaded: MuJoCo's GL loader keeps the function pointers it took from it
}

#else

int cfv_egl_make_current(char* err, int size) {
  snprintf(err, size, "this chainfd-view was built without the EGL headers (Debian: libegl-dev)");
  return 1;
}

void cfv_egl_release(void) {}

#endif
