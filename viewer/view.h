// view.h: the window (interactive, real time) and the headless renderer (frames to PNG).
#ifndef CHAINFD_VIEWER_VIEW_H
#define CHAINFD_VIEWER_VIEW_H

#include "sim.h"

typedef struct cfv_view_opts {
  int width, height;      // window or frame size
  const char* camera;     // a fixed camera of the model by name, or NULL: the free camera
  double speed;           // target simulated seconds per wall second (1: real time)
  int overlay;            // draw the info overlay (window: on; headless: off unless asked)
  int hide_moving;        // do not draw the geoms of moving bodies (tests compare against it)
  int every_link;         // an extended chain: draw every link, never several as one capsule
  int switch_every;       // > 0: switch to the next dynamics every this many frames
  double run_for;         // window: close after this many wall seconds (0: never)

  // headless
  int frames;             // frames to render
  double fps;             // simulated frames per second: each frame advances 1/fps seconds
  double warmup;          // simulated seconds before the first frame
  const char* out;        // directory for frame_NNNNN.png (NULL: render without saving)
  int video;              // also pipe the frames to ffmpeg (OUT/chainfd.mp4) when it is installed
  const char* gl;         // the OpenGL context: "glfw" (a hidden window), "egl" (no window system),
                          // or "auto" (NULL): GLFW where $DISPLAY is set, else EGL
} cfv_view_opts;

void cfv_view_defaults(cfv_view_opts* o);

// Both return the process exit status: 0, or 1 with a message on stderr.
int cfv_run_window(cfv_sim* s, const cfv_view_opts* o);
int cfv_run_headless(cfv_sim* s, const cfv_view_opts* o);

#endif  // CHAINFD_VIEWER_VIEW_H
