// chainfd-view: a viewer for long chains on MuJoCo's renderer, stepping through chainfd's back ends
// or MuJoCo's own dynamics, switchable live; headless frames to PNG, and a benchmark mode.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mujoco/mujoco.h>

#include "sim.h"
#include "view.h"

static const char* usage =
    "usage: chainfd-view MODEL [options]\n"
    "  MODEL                  an MJCF file, a .mjb file, or a generated chain chain:N[,key=value...]\n"
    "                         (keys as in `chainfd info`; MuJoCo compiles chains of up to 1023 links;\n"
    "                         a model with <numeric name=\"chainfd_extend\" data=\"LINKS\"/> is\n"
    "                         its chain with links 1.. repeated to LINKS links, stepped by cpu.fast\n"
    "                         or cuda.abia through the extended rollouts: see\n"
    "                         scenes/showcase_chain10000.xml)\n"
    "dynamics:\n"
    "  --backend NAME         mujoco, cpu.fast, cpu.abia, cpu.jsiia, cpu.cfa, cuda.* with a GPU (or\n"
    "                         cfa, abia, jsiia, cpu, auto); default: the model's chainfd plugin\n"
    "                         config, else cpu.fast\n"
    "  --list                 print the dynamics this model can use, and exit\n"
    "  --key N                keyframe to start from and reset to (default 0 when the model has\n"
    "                         keyframes; -1: qpos0)\n"
    "  --wave[=AMP,FREQ,LEN[,ODD]]  drive every actuator with a travelling wave around its start\n"
    "                         control: AMP sin(2 pi (FREQ t - i/LEN) + ODD cycles on odd i);\n"
    "                         models can ask for it with <numeric name=\"chainfd_wave\" data=\"...\"/>\n"
    "  --no-wave              ignore the model's chainfd_wave\n"
    "view:\n"
    "  --size WxH             window or frame size (window 1280x800, headless 640x480)\n"
    "  --camera NAME          a fixed camera of the model (default: the free camera)\n"
    "  --speed X              simulated seconds per wall second (default 1)\n"
    "  --overlay, --no-overlay  the info overlay (default: on in the window, off headless)\n"
    "  --switch-every N       switch to the next dynamics every N frames\n"
    "  --run-for SECONDS      close the window after SECONDS\n"
    "  --hide-moving          do not draw the geoms of moving bodies\n"
    "  --every-link           an extended chain: draw every link (by default links short against\n"
    "                         their radius are drawn several to a capsule; key J switches)\n"
    "headless (offscreen, through a hidden GLFW window on an X server, or EGL without one):\n"
    "  --headless             render frames instead of opening a window\n"
    "  --gl auto|glfw|egl     the OpenGL context (auto: GLFW where $DISPLAY is set, else EGL,\n"
    "                         which on a GPU server draws on the GPU with no display)\n"
    "  --frames N             frames to render (default 1)\n"
    "  --fps F                frames per simulated second (default 30)\n"
    "  --warmup SECONDS       simulate this long before the first frame (default 0)\n"
    "  --out DIR              write DIR/frame_NNNNN.png\n"
    "  --video                also write DIR/chainfd.mp4 when ffmpeg is installed\n"
    "benchmark (no drawing, no display):\n"
    "  --benchmark SECONDS    step for SECONDS of wall time and print the real-time factor;\n"
    "                         --backend all runs every dynamics in turn\n"
    "  --substeps K           steps per chunk, as a 60 Hz window takes them (default: 1/60 s of\n"
    "                         steps); cpu.fast runs a chunk through the CPU rollout. 1: one by one\n";

static void mujoco_warning(const char* msg) { fprintf(stderr, "chainfd-view: MuJoCo: %s\n", msg); }

// MuJoCo's errors are fatal (it must not continue); say so plainly rather than in a log file.
static void mujoco_error(const char* msg) {
  fprintf(stderr, "chainfd-view: MuJoCo error: %s\n", msg);
  exit(1);
}

static int bad_usage(const char* fmt, const char* arg) {
  fprintf(stderr, "chainfd-view: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(chainfd-view --help for the options)\n");
  return 2;
}

static int parse_double(const char* s, double lo, double hi, double* out) {
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (!s[0] || *end || errno || !isfinite(v) || v < lo || v > hi) return 1;
  *out = v;
  return 0;
}

static int parse_int(const char* s, int lo, int hi, int* out) {
  double v;
  if (parse_double(s, lo, hi, &v) || v != floor(v)) return 1;
  *out = (int)v;
  return 0;
}

int main(int argc, char** argv) {
  mju_user_warning = mujoco_warning;
  mju_user_error = mujoco_error;

  cfv_view_opts o;
  cfv_view_defaults(&o);
  const char* model = NULL;
  const char* backend = NULL;
  int key = -2, headless = 0, list = 0, size_given = 0, overlay = -1;
  int wave = -1;  // -1: as the model says; 0: off; 1: on
  double wave_prm[4] = {0, 0, 0, 0};
  int wave_given = 0;
  double benchmark = 0;
  int substeps = 0;  // 0: a 60 Hz frame's worth

  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_ARG()                                                       \
  do {                                                                   \
    if (!next) return bad_usage("option %s needs a value", a);           \
    i++;                                                                 \
  } while (0)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(a, "--backend")) {
      NEED_ARG();
      backend = next;
    } else if (!strcmp(a, "--list")) {
      list = 1;
    } else if (!strcmp(a, "--key")) {
      NEED_ARG();
      if (parse_int(next, -1, 1 << 30, &key)) return bad_usage("bad keyframe index '%s'", next);
    } else if (!strcmp(a, "--wave")) {
      wave = 1;
    } else if (!strncmp(a, "--wave=", 7)) {
      wave = 1;
      int n = sscanf(a + 7, "%lf,%lf,%lf,%lf", &wave_prm[0], &wave_prm[1], &wave_prm[2], &wave_prm[3]);
      if (n < 3 || !(wave_prm[1] >= 0)) return bad_usage("bad wave '%s' (AMP,FREQ,LEN[,ODD])", a + 7);
      wave_given = 1;
    } else if (!strcmp(a, "--no-wave")) {
      wave = 0;
    } else if (!strcmp(a, "--size")) {
      NEED_ARG();
      if (sscanf(next, "%dx%d", &o.width, &o.height) != 2 || o.width < 16 || o.height < 16 ||
          o.width > 8192 || o.height > 8192)
        return bad_usage("bad size '%s' (WxH, 16..8192)", next);
      size_given = 1;
    } else if (!strcmp(a, "--camera")) {
      NEED_ARG();
      o.camera = next;
    } else if (!strcmp(a, "--speed")) {
      NEED_ARG();
      if (parse_double(next, 1.0 / 1024, 1024, &o.speed)) return bad_usage("bad speed '%s'", next);
    } else if (!strcmp(a, "--overlay")) {
      overlay = 1;
    } else if (!strcmp(a, "--no-overlay")) {
      overlay = 0;
    } else if (!strcmp(a, "--switch-every")) {
      NEED_ARG();
      if (parse_int(next, 1, 1 << 30, &o.switch_every)) return bad_usage("bad frame count '%s'", next);
    } else if (!strcmp(a, "--run-for")) {
      NEED_ARG();
      if (parse_double(next, 0, 1e9, &o.run_for)) return bad_usage("bad duration '%s'", next);
    } else if (!strcmp(a, "--hide-moving")) {
      o.hide_moving = 1;
    } else if (!strcmp(a, "--every-link")) {
      o.every_link = 1;
    } else if (!strcmp(a, "--headless")) {
      headless = 1;
    } else if (!strcmp(a, "--gl")) {
      NEED_ARG();
      if (strcmp(next, "auto") && strcmp(next, "glfw") && strcmp(next, "egl"))
        return bad_usage("--gl takes auto, glfw or egl, not '%s'", next);
      o.gl = next;
    } else if (!strcmp(a, "--frames")) {
      NEED_ARG();
      if (parse_int(next, 1, 1 << 24, &o.frames)) return bad_usage("bad frame count '%s'", next);
    } else if (!strcmp(a, "--fps")) {
      NEED_ARG();
      if (parse_double(next, 1e-3, 1e6, &o.fps)) return bad_usage("bad fps '%s'", next);
    } else if (!strcmp(a, "--warmup")) {
      NEED_ARG();
      if (parse_double(next, 0, 1e6, &o.warmup)) return bad_usage("bad warm-up '%s'", next);
    } else if (!strcmp(a, "--out")) {
      NEED_ARG();
      o.out = next;
    } else if (!strcmp(a, "--video")) {
      o.video = 1;
    } else if (!strcmp(a, "--benchmark")) {
      NEED_ARG();
      if (parse_double(next, 1e-3, 1e6, &benchmark)) return bad_usage("bad duration '%s'", next);
    } else if (!strcmp(a, "--substeps")) {
      NEED_ARG();
      double k;
      if (parse_double(next, 1, CFV_MAX_SUBSTEPS, &k) || k != floor(k))
        return bad_usage("bad substep count '%s' (1 to 256)", next);
      substeps = (int)k;
    } else if (a[0] == '-' && a[1]) {
      return bad_usage("unknown option '%s'", a);
    } else if (!model) {
      model = a;
    } else {
      return bad_usage("more than one model given ('%s')", a);
    }
#undef NEED_ARG
  }
  if (!model) return bad_usage("%s", "no model given");
  if (headless && !size_given) {
    o.width = 640;
    o.height = 480;
  }
  o.overlay = overlay >= 0 ? overlay : !headless;
  if (o.video && !o.out) return bad_usage("%s", "--video needs --out DIR");

  char err[1024];
  mjModel* m = cfv_load(model, err, sizeof err);
  if (!m) {
    fprintf(stderr, "chainfd-view: cannot load model: %s\n", err);
    return 1;
  }
  if (key == -2) key = m->nkey > 0 ? 0 : -1;
  if (key >= m->nkey) {
    fprintf(stderr, "chainfd-view: the model has %d keyframes; no keyframe %d\n", (int)m->nkey, key);
    mj_deleteModel(m);
    return 1;
  }

  int bench_all = benchmark > 0 && backend && !strcmp(backend, "all");
  cfv_sim s;
  if (cfv_sim_init(&s, m, bench_all ? NULL : backend, key, err, sizeof err)) {
    fprintf(stderr, "chainfd-view: %s\n", err);
    cfv_sim_free(&s);
    return 1;
  }
  if (wave == 0) s.wave = 0;
  if (wave == 1) {
    if (m->nu == 0) fprintf(stderr, "chainfd-view: --wave: the model has no actuators\n");
    s.wave = m->nu > 0;
    if (wave_given) {
      s.wave_amp = wave_prm[0];
      s.wave_freq = wave_prm[1];
      s.wave_len = wave_prm[2];
      s.wave_odd = wave_prm[3];
    } else if (s.wave_freq == 0) {  // the model gave none: a gentle wave, half the chain long
      s.wave_amp = 0.3;
      s.wave_freq = 0.5;
      s.wave_len = fmax(1, m->nu / 2.0);
    }
  }

  int status = 0;
  if (list) {
    printf("model: %s: %d links, %d dofs%s, timestep %g s\n", model, s.links, cfv_sim_dofs(&s),
           s.ext ? " (the model's chain extended)" : "", m->opt.timestep);
    for (int i = s.ext ? 1 : 0; i < s.ndyn; i++)  // (an extended chain: never MuJoCo)
      printf("%d %s%s\n", i + 1, s.dyn_name[i], i == s.current ? "  (start)" : "");
    if (s.unavailable[0]) printf("not available here: %s\n", s.unavailable);
  } else if (benchmark > 0) {
    for (int i = 0; i < s.ndyn && status == 0; i++) {
      if (!bench_all && i != s.current) continue;
      if (bench_all && cfv_sim_select(&s, i, err, sizeof err)) {
        printf("backend=%s cannot: %s\n", s.dyn_name[i], err);
        continue;
      }
      int k = substeps ? substeps : (int)fmax(1, round(1.0 / (60 * m->opt.timestep)));
      status = cfv_sim_benchmark(&s, benchmark, k < CFV_MAX_SUBSTEPS ? k : CFV_MAX_SUBSTEPS);
    }
  } else if (headless) {
    status = cfv_run_headless(&s, &o);
  } else {
    status = cfv_run_window(&s, &o);
  }
  cfv_sim_free(&s);
  return status;
}
