// x_input: drives chainfd-view's window with synthetic X events (XSendEvent), so that the keys and
// mouse handling can be tested under Xvfb with no one at the keyboard.
//
//   x_input TITLE_PREFIX TIMEOUT ACTION...
//
// Waits up to TIMEOUT seconds for a window whose title starts with TITLE_PREFIX, then runs:
//   wait:S                 sleep S seconds
//   key:NAME[+ctrl][+shift]  press and release a key (X keysym name: b, space, Right, BackSpace)
//   move:X,Y               pointer motion to window pixel (X, Y)
//   click:B,X,Y            button B (1 left, 3 right) pressed and released at (X, Y)
//   dclick:B,X,Y           a double click
//   drag:B,X1,Y1,X2,Y2[,ctrl]  press at 1, move in 20 steps over 1 s to 2, release
// Exit 0 when every action was sent, 1 when the window never appeared, 2 on bad usage.
#define _DEFAULT_SOURCE  // usleep
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <X11/Xlib.h>
#include <X11/Xutil.h>

static Display* dpy;
static Window root, target;

static Window find(Window w, const char* prefix) {
  char* name = NULL;
  if (XFetchName(dpy, w, &name) && name) {
    int match = strncmp(name, prefix, strlen(prefix)) == 0;
    XFree(name);
    if (match) return w;
  }
  Window r, parent, *kids = NULL;
  unsigned n = 0;
  Window found = 0;
  if (XQueryTree(dpy, w, &r, &parent, &kids, &n)) {
    for (unsigned i = 0; i < n && !found; i++) found = find(kids[i], prefix);
    if (kids) XFree(kids);
  }
  return found;
}

static void send(XEvent* e, long mask) {
  XSendEvent(dpy, target, True, mask, e);
  XFlush(dpy);
  usleep(20000);
}

static void key(const char* spec) {
  char name[64];
  snprintf(name, sizeof name, "%s", spec);
  unsigned state = 0;
  char* plus;
  while ((plus = strrchr(name, '+'))) {
    if (!strcmp(plus, "+ctrl")) state |= ControlMask;
    else if (!strcmp(plus, "+shift")) state |= ShiftMask;
    *plus = 0;
  }
  KeySym sym = XStringToKeysym(name);
  XEvent e;
  memset(&e, 0, sizeof e);
  e.xkey.type = KeyPress;
  e.xkey.display = dpy;
  e.xkey.window = target;
  e.xkey.root = root;
  e.xkey.same_screen = True;
  e.xkey.state = state;
  e.xkey.keycode = XKeysymToKeycode(dpy, sym);
  e.xkey.time = CurrentTime;
  send(&e, KeyPressMask);
  e.xkey.type = KeyRelease;
  send(&e, KeyReleaseMask);
}

static void motion(int x, int y, unsigned state) {
  XEvent e;
  memset(&e, 0, sizeof e);
  e.xmotion.type = MotionNotify;
  e.xmotion.display = dpy;
  e.xmotion.window = target;
  e.xmotion.root = root;
  e.xmotion.same_screen = True;
  e.xmotion.x = e.xmotion.x_root = x;
  e.xmotion.y = e.xmotion.y_root = y;
  e.xmotion.state = state;
  send(&e, PointerMotionMask);
}

static void button(int b, int x, int y, int press, unsigned state) {
  XEvent e;
  memset(&e, 0, sizeof e);
  e.xbutton.type = press ? ButtonPress : ButtonRelease;
  e.xbutton.display = dpy;
  e.xbutton.window = target;
  e.xbutton.root = root;
  e.xbutton.same_screen = True;
  e.xbutton.button = (unsigned)b;
  e.xbutton.x = e.xbutton.x_root = x;
  e.xbutton.y = e.xbutton.y_root = y;
  e.xbutton.state = state;
  send(&e, press ? ButtonPressMask : ButtonReleaseMask);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: x_input TITLE_PREFIX TIMEOUT ACTION...\n");
    return 2;
  }
  dpy = XOpenDisplay(NULL);
  if (!dpy) {
    fprintf(stderr, "x_input: no X display\n");
    return 1;
  }
  root = DefaultRootWindow(dpy);
  double timeout = atof(argv[2]);
  for (double t = 0; !(target = find(root, argv[1])) && t < timeout; t += 0.1) usleep(100000);
  if (!target) {
    fprintf(stderr, "x_input: no window titled '%s...' within %g s\n", argv[1], timeout);
    return 1;
  }
  usleep(500000);  // let the viewer draw its first frames

  for (int i = 3; i < argc; i++) {
    const char* a = argv[i];
    int b, x, y, x2, y2;
    char ctrl[8] = "";
    printf("x_input: %s\n", a);
    fflush(stdout);
    if (!strncmp(a, "wait:", 5)) {
      usleep((useconds_t)(atof(a + 5) * 1e6));
    } else if (!strncmp(a, "key:", 4)) {
      key(a + 4);
    } else if (sscanf(a, "move:%d,%d", &x, &y) == 2) {
      motion(x, y, 0);
    } else if (sscanf(a, "click:%d,%d,%d", &b, &x, &y) == 3) {
      motion(x, y, 0);
      button(b, x, y, 1, 0);
      button(b, x, y, 0, 0);
    } else if (sscanf(a, "dclick:%d,%d,%d", &b, &x, &y) == 3) {
      motion(x, y, 0);
      for (int k = 0; k < 2; k++) {
        button(b, x, y, 1, 0);
        button(b, x, y, 0, 0);
      }
    } else if (sscanf(a, "drag:%d,%d,%d,%d,%d,%7s", &b, &x, &y, &x2, &y2, ctrl) >= 5) {
      unsigned state = !strcmp(ctrl, "ctrl") ? ControlMask : 0;
      unsigned held = state | (b == 1 ? Button1Mask : b == 2 ? Button2Mask : Button3Mask);
      motion(x, y, state);
      button(b, x, y, 1, state);
      for (int k = 1; k <= 20; k++) {
        motion(x + (x2 - x) * k / 20, y + (y2 - y) * k / 20, held);
        usleep(30000);
      }
      button(b, x2, y2, 0, held);
    } else {
      fprintf(stderr, "x_input: bad action '%s'\n", a);
      return 2;
    }
  }
  XCloseDisplay(dpy);
  return 0;
}
