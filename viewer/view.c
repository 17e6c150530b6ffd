// The window and the headless renderer, both on MuJoCo's own renderer (mjv_ scene, mjr_ OpenGL).
//
// Real time: each frame steps until simulated time catches up with wall time (times the speed
// factor), but for no longer than a budget of wall time (STEP_BUDGET, or 70% of what drawing the
// last frame took when drawing is slow, as with software OpenGL), so that the window keeps drawing
// and answering input when the dynamics is slower than real time (MuJoCo's own on a long chain);
// the debt is then dropped rather than carried, and the overlay shows the real-time factor that
// was actually achieved.
#define _POSIX_C_SOURCE 200809L  // popen, strtok_r

#include "view.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GLFW_INCLUDE_NONE
#include <GLFW/glfw3.h>

#include "cfd_median.h"
#include "egl.h"
#include "png.h"

#define STEP_BUDGET 0.025     // wall seconds of stepping per frame at most (or 0.7 x drawing)
#define STATS_WINDOW 0.5      // wall seconds over which the overlay's rates are averaged
#define DOUBLE_CLICK 0.3      // seconds
#define HIDDEN_GROUP 5        // geom group that --hide-moving moves geoms into (and hides)

void cfv_view_defaults(cfv_view_opts* o) {
  memset(o, 0, sizeof(*o));
  o->width = 1280;
  o->height = 800;
  o->speed = 1;
  o->overlay = 1;
  o->frames = 1;
  o->fps = 30;
}

// --- shared state -------------------------------------------------------------------------------------

typedef struct rates {  // accumulated over STATS_WINDOW, then published
  double t0, step_wall, sim;
  long long steps, mujoco_steps;
  int frames;
  double rtf, step_us, steps_per_frame, fps;
  int have;
} rates;

typedef struct viewer {
  cfv_sim* sim;
  const cfv_view_opts* o;
  GLFWwindow* win;
  mjvCamera cam;
  mjvOption opt;
  mjvScene scn;
  mjrContext con;
  mjvPerturb pert;
  int headless;
  int per_frame;  // headless: steps per frame

  // interaction
  int left, middle, right;
  double lastx, lasty, last_click;
  int last_button;
  int paused, show_help, show_overlay;
  double speed;
  int shots;
  double peak_force, peak_torque;  // largest mouse force (N), torque (N m) of this perturbation

  // an extended chain's drawing (add_extended_chain): each model geom's look as MuJoCo drew it
  mjvGeom* ext_look;  // [ngeom]
  char* ext_have;     // [ngeom]: the scene had that geom
  double* ext_rel;    // [nbody][12]: each body's pose (R, p) in the frame of the body it is welded to
  int* ext_next;      // [nbody]: the next body welded to the same body (-1: none), from ...
  int* ext_first;     // [nbody]: ... the first body welded to this one (itself when it moves)
  // joined drawing: where each link draws one capsule (or cylinder) from its origin to its child's
  // and the links are short against its radius, ext_join links are drawn as one capsule from the
  // first's origin to the last's end (a draw call each, not ext_join); 1: every link drawn
  int ext_join;
  int ext_every;      // every link drawn all the same (J, --every-link)
  int* ext_geom;      // [nbody]: the moving body's one geom (joined drawing)
  double* ext_tip;    // [nbody][3]: the end of that geom's axis in the body's frame

  // real-time sync
  double draw_time;  // wall seconds the last frame took to draw and swap
  int resync;
  double sync_wall, sync_sim;
  rates r;
} viewer;

// One line on stdout per user action: a log of the session, and what the tests read.
static void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  fflush(stdout);
}

static void glfw_error(int code, const char* what) {
  fprintf(stderr, "chainfd-view: GLFW error %d: %s\n", code, what);
}

// GLFW with an OpenGL context: a visible window, or a hidden one for offscreen rendering.
static GLFWwindow* open_window(int width, int height, int visible, const char* title) {
  glfwSetErrorCallback(glfw_error);
  if (!glfwInit()) {
    fprintf(stderr, "chainfd-view: cannot initialise GLFW: no X display? (run under xvfb-run -a; "
                    "--headless --gl egl and --benchmark need no display)\n");
    return NULL;
  }
  glfwWindowHint(GLFW_VISIBLE, visible ? GLFW_TRUE : GLFW_FALSE);
  glfwWindowHint(GLFW_SAMPLES, visible ? 4 : 0);  // offscreen multisampling is MuJoCo's own
  GLFWwindow* w = glfwCreateWindow(width, height, title, NULL, NULL);
  if (!w) {
    fprintf(stderr, "chainfd-view: cannot create an OpenGL window\n");
    glfwTerminate();
    return NULL;
  }
  glfwMakeContextCurrent(w);
  glfwSwapInterval(1);
  return w;
}

// How many links of an extended chain one capsule may draw (1: none joined). Joined drawing needs
// every link to be a body of one joint drawing one capsule or cylinder (welded bodies included)
// that runs from the body's origin to the next link's; then links of length len and radius r
// overlap into a tube, and floor(r / len) of them drawn as one capsule look the same at any
// distance that shows the whole chain (the 10,000-link showcase: 40 links of 1 cm, radius 0.4 m).
static int joined_links(viewer* v) {
  const mjModel* m = v->sim->m;
  cfv_sim* s = v->sim;
  double ratio = INFINITY;
  for (int i = 0; i < s->links; i++) {
    int dof = chainfd_rollout_link_dof(s->ext_cpu, i), body = m->dof_bodyid[dof];
    if (m->body_jntnum[body] != 1 || m->body_weldid[body] != body ||
        m->jnt_type[m->body_jntadr[body]] != mjJNT_HINGE)  // a slide would open gaps a group hides
      return 1;
    if (v->ext_geom[body] == -2) {  // this body's check, once
      int g = -1, geoms = 0;
      for (int b = v->ext_first[body]; b >= 0; b = v->ext_next[b]) {
        geoms += m->body_geomnum[b];
        if (b == body && m->body_geomnum[b] == 1) g = m->body_geomadr[b];
      }
      if (geoms != 1 || g < 0 || (m->geom_type[g] != mjGEOM_CAPSULE && m->geom_type[g] != mjGEOM_CYLINDER))
        return 1;
      double R[9], *tip = v->ext_tip + 3 * body, half = m->geom_size[3 * g + 1];
      mju_quat2Mat(R, m->geom_quat + 4 * g);
      double start[3];  // the axis's two ends; either may be at the origin (fromto's order)
      for (int k = 0; k < 3; k++) {
        start[k] = m->geom_pos[3 * g + k] - half * R[3 * k + 2];
        tip[k] = m->geom_pos[3 * g + k] + half * R[3 * k + 2];
      }
      if (mju_norm3(tip) < mju_norm3(start))
        for (int k = 0; k < 3; k++) {
          double t = tip[k];
          tip[k] = start[k];
          start[k] = t;
        }
      double len = mju_norm3(tip);
      if (!(len > 0) || mju_norm3(start) > 1e-6 * len) return 1;  // not from the body's origin
      v->ext_geom[body] = g;
      ratio = fmin(ratio, m->geom_size[3 * g] / len);
    }
    // the geom must end where the next link begins (its body's offset; the repeats' first body
    // follows the model's last)
    if (i + 1 < s->links) {
      int next = m->dof_bodyid[chainfd_rollout_link_dof(s->ext_cpu, i + 1)];
      double gap[3];
      mju_sub3(gap, v->ext_tip + 3 * body, m->body_pos + 3 * next);
      // next hangs from this body; or it is the repeats' first, which hangs from link 0's body
      int wrap = next == m->dof_bodyid[chainfd_rollout_link_dof(s->ext_cpu, 1)];
      int from = wrap ? m->dof_bodyid[chainfd_rollout_link_dof(s->ext_cpu, 0)] : body;
      if (m->body_parentid[next] != from) return 1;
      if (mju_norm3(gap) > 1e-6 * mju_norm3(v->ext_tip + 3 * body)) return 1;
    }
  }
  return ratio >= 2 && ratio < INFINITY ? (int)fmin(floor(ratio), 1 << 20) : 1;
}

// An extended chain's drawing: which bodies are welded to each moving body and where, and how many
// geoms its links draw; -1 when out of memory (then the model's own chain is drawn).
static long init_extended_drawing(viewer* v) {
  const mjModel* m = v->sim->m;
  cfv_sim* s = v->sim;
  size_t nb = (size_t)m->nbody;
  v->ext_look = calloc((size_t)m->ngeom + 1, sizeof(mjvGeom));
  v->ext_have = calloc((size_t)m->ngeom + 1, 1);
  v->ext_rel = malloc(sizeof(double) * 12 * nb);
  v->ext_next = malloc(sizeof(int) * 3 * nb);
  v->ext_tip = malloc(sizeof(double) * 3 * nb);
  v->ext_join = 1;
  if (!v->ext_look || !v->ext_have || !v->ext_rel || !v->ext_next || !v->ext_tip) {
    free(v->ext_look);  // none kept: add_extended_chain draws nothing of its own without ext_next
    free(v->ext_have);
    free(v->ext_rel);
    free(v->ext_next);
    free(v->ext_tip);
    v->ext_look = NULL, v->ext_have = NULL, v->ext_rel = NULL, v->ext_next = NULL, v->ext_tip = NULL;
    return -1;
  }
  v->ext_first = v->ext_next + nb;
  v->ext_geom = v->ext_first + nb;
  for (size_t b = 0; b < nb; b++) v->ext_first[b] = v->ext_next[b] = -1, v->ext_geom[b] = -2;
  for (int b = (int)nb - 1; b > 0; b--) {  // parents come before children: a list in body order
    int w = m->body_weldid[b];
    double* rel = v->ext_rel + 12 * b;
    if (w == b || w == 0) {
      mju_copy(rel, (const mjtNum[9]){1, 0, 0, 0, 1, 0, 0, 0, 1}, 9);
      mju_zero3(rel + 9);
    }
    if (w == 0) continue;
    v->ext_next[b] = v->ext_first[w];
    v->ext_first[w] = b;
  }
  for (int b = 1; b < (int)nb; b++) {  // a welded body's pose in its weld body's frame
    int w = m->body_weldid[b], parent = m->body_parentid[b];
    if (w == 0 || w == b) continue;
    double R[9], *rel = v->ext_rel + 12 * b;
    const double* prel = v->ext_rel + 12 * parent;
    mju_quat2Mat(R, m->body_quat + 4 * b);
    mju_mulMatMat(rel, prel, R, 3, 3, 3);
    mju_mulMatVec3(rel + 9, prel, m->body_pos + 3 * b);
    mju_addTo3(rel + 9, prel + 9);
  }
  long count = 0;
  for (int i = 0; i < s->links; i++) {
    int body = m->dof_bodyid[chainfd_rollout_link_dof(s->ext_cpu, i)];
    for (int b = v->ext_first[body]; b >= 0; b = v->ext_next[b]) count += m->body_geomnum[b];
  }
  v->ext_join = joined_links(v);
  return count;
}

static void init_scene(viewer* v, int fontscale) {
  const mjModel* m = v->sim->m;
  mjv_defaultFreeCamera(m, &v->cam);
  if (v->o->camera) {
    int id = mj_name2id(m, mjOBJ_CAMERA, v->o->camera);
    if (id >= 0) {
      v->cam.type = mjCAMERA_FIXED;
      v->cam.fixedcamid = id;
    } else {
      fprintf(stderr, "chainfd-view: no camera '%s' in the model; using the free camera\n",
              v->o->camera);
    }
  }
  mjv_defaultOption(&v->opt);
  if (v->o->hide_moving) v->opt.geomgroup[HIDDEN_GROUP] = 0;
  mjv_defaultPerturb(&v->pert);
  mjv_defaultScene(&v->scn);
  cfv_sim* s = v->sim;
  long ext_geoms = s->ext ? init_extended_drawing(v) : 0;
  v->ext_every = v->o->every_link;
  if (ext_geoms < 0) {
    fprintf(stderr, "chainfd-view: out of memory for drawing the extended chain; drawing the model's\n");
    ext_geoms = 0;
  }
  mjv_makeScene(m, &v->scn, (int)(2 * m->ngeom + ext_geoms + 2000));
  mjr_defaultContext(&v->con);
  mjr_makeContext(m, &v->con, fontscale);
}

static void free_scene(viewer* v) {
  free(v->ext_look);
  free(v->ext_have);
  free(v->ext_rel);
  free(v->ext_next);
  free(v->ext_tip);
  mjv_freeScene(&v->scn);
  mjr_freeContext(&v->con);
}

// --- stepping and rates ---------------------------------------------------------------------------------

// The mouse's force on the selected body, renewed before every step as MuJoCo's simulate does.
static void apply_perturbation(viewer* v) {
  const mjModel* m = v->sim->m;
  mjData* d = v->sim->d;
  mju_zero(d->xfrc_applied, 6 * m->nbody);
  mjv_applyPerturbPose(m, d, &v->pert, 0);
  mjv_applyPerturbForce(m, d, &v->pert);
  if (v->pert.active && v->pert.select > 0) {
    v->peak_force = fmax(v->peak_force, mju_norm3(d->xfrc_applied + 6 * v->pert.select));
    v->peak_torque = fmax(v->peak_torque, mju_norm3(d->xfrc_applied + 6 * v->pert.select + 3));
  }
}

static const char* body_name(const mjModel* m, int body, char* buf, int size) {
  const char* nm = mj_id2name(m, mjOBJ_BODY, body);
  if (nm && nm[0]) snprintf(buf, size, "%s", nm);
  else snprintf(buf, size, "#%d", body);
  return buf;
}

// Up to `want` steps (at least one): a frame's worth at once through cfv_sim_substeps where it
// applies (cpu.fast, no perturbation), else one step. *done: how many were taken.
static int timed_steps(viewer* v, int want, int* done) {
  double t = cfv_now();
  if (!v->headless) apply_perturbation(v);
  long long mj0 = v->sim->mujoco_steps;
  int k = want > 1 ? cfv_sim_substeps(v->sim, want < CFV_MAX_SUBSTEPS ? want : CFV_MAX_SUBSTEPS) : 0;
  int rc = k ? 0 : cfv_sim_step(v->sim);
  if (!k) k = 1;
  v->r.step_wall += cfv_now() - t;
  v->r.steps += k;
  v->r.mujoco_steps += v->sim->mujoco_steps - mj0;
  v->r.sim += k * v->sim->m->opt.timestep;
  if (rc) {
    fprintf(stderr, "chainfd-view: %s\n", v->sim->error);
    v->paused = 1;
  }
  if (done) *done = k;
  return rc;
}

static int timed_step(viewer* v) { return timed_steps(v, 1, NULL); }

// n steps, a frame's worth at a time where cfv_sim_substeps applies
static int run_steps(viewer* v, int n) {
  int status = 0;
  for (int i = 0, k = 0; i < n && status == 0; i += k) status = timed_steps(v, n - i, &k);
  return status;
}

// The window publishes rates averaged over the last STATS_WINDOW; headless, which renders as fast
// as it can, publishes cumulative ones, and its real-time factor is that of the stepping alone.
static void update_rates(viewer* v, double now) {
  rates* r = &v->r;
  r->frames++;
  double span = now - r->t0;
  if (!v->headless && span < STATS_WINDOW && r->have) return;
  r->step_us = r->steps > 0 ? 1e6 * r->step_wall / (double)r->steps : 0;
  r->steps_per_frame = v->headless ? v->per_frame : (double)r->steps / r->frames;
  double wall = v->headless ? r->step_wall : span;
  r->rtf = wall > 0 ? r->sim / wall : 0;
  r->fps = r->frames / fmax(span, 1e-9);
  r->have = 1;
  if (v->headless) return;
  r->t0 = now;
  r->step_wall = r->sim = 0;
  r->steps = r->mujoco_steps = 0;
  r->frames = 0;
}

// Steps until the simulation catches up with wall time, within the frame's budget.
static void advance_real_time(viewer* v) {
  cfv_sim* s = v->sim;
  double now = cfv_now();
  if (v->paused) {
    v->resync = 1;
    return;
  }
  if (v->resync || s->d->time < v->sync_sim) {  // after a pause, a reset, a bad-state reset
    v->sync_wall = now;
    v->sync_sim = s->d->time;
    v->resync = 0;
  }
  double target = v->sync_sim + (now - v->sync_wall) * v->speed;
  double deadline = now + fmax(STEP_BUDGET, 0.7 * v->draw_time);
  while (s->d->time < target && !v->paused) {
    double t_before = s->d->time;
    int want = (int)ceil((target - s->d->time) / s->m->opt.timestep);
    if (timed_steps(v, want > 1 ? want : 1, NULL)) break;
    if (s->d->time <= t_before) {  // MuJoCo reset a diverged state to t = 0
      v->resync = 1;
      break;
    }
    if (cfv_now() > deadline) {  // slower than real time: drop the debt, keep drawing
      v->sync_wall = cfv_now();
      v->sync_sim = s->d->time;
      break;
    }
  }
}

// --- drawing ------------------------------------------------------------------------------------------

// How an extended chain's links are drawn ("" for a model's own chain or links that cannot join).
static void drawing_mode(const viewer* v, char* out, int size) {
  out[0] = 0;
  if (!v->sim->ext || v->ext_join < 2) return;
  int links = v->sim->links;
  if (v->ext_every)
    snprintf(out, size, "every link  [J]");
  else
    snprintf(out, size, "%d capsules of %d links  [J]", (links + v->ext_join - 1) / v->ext_join,
             v->ext_join);
}

static void draw_overlay(viewer* v, mjrRect rect) {
  cfv_sim* s = v->sim;
  const rates* r = &v->r;
  char titles[512], values[512];
  char speed[64] = "";
  if (v->speed != 1) snprintf(speed, sizeof speed, " (target x%g)", v->speed);
  char drawn[96];
  drawing_mode(v, drawn, sizeof drawn);
  snprintf(titles, sizeof titles,
           "Dynamics\nLinks\nStep\nSteps/frame\n%s\nTime%s%s%s",
           v->headless ? "Real-time (stepping only)" : "Real-time factor",
           drawn[0] ? "\nDrawn" : "", s->wave ? "\nController" : "", v->paused ? "\n" : "");
  snprintf(values, sizeof values, "%s  [B]\n%d  (dofs %d%s)\n%.1f us\n%.1f\n%.2f%s\n%.3f s%s%s%s%s",
           cfv_sim_name(s), s->links, cfv_sim_dofs(s), s->ext ? ", the model's chain extended" : "",
           r->step_us, r->steps_per_frame, r->rtf, speed, s->d->time, drawn[0] ? "\n" : "", drawn,
           s->wave ? "\nwave  [W]" : "", v->paused ? "\nPAUSED  [space]" : "");
  mjr_overlay(mjFONT_NORMAL, mjGRID_TOPLEFT, rect, titles, values, &v->con);

  // why MuJoCo took steps that a chainfd back end was asked for, wrapped to the window's width
  if (s->current != 0 && s->fallback_why[0] && v->r.have) {
    char line[2 * CFV_MSG];
    int cols = rect.width / (v->con.charWidth['n'] > 0 ? v->con.charWidth['n'] : 8) - 4;
    if (cols < 30) cols = 30;
    int len = snprintf(line, sizeof line, "MuJoCo takes these steps: %s", s->fallback_why);
    for (int start = 0, last_space = -1, i = 0; i < len; i++) {
      if (line[i] == ' ') last_space = i;
      if (i - start >= cols && last_space > start) {
        line[last_space] = '\n';
        start = last_space + 1;
      }
    }
    mjr_overlay(mjFONT_NORMAL, mjGRID_BOTTOMLEFT, rect, line, NULL, &v->con);
  }
  if (v->show_help) {
    static const char* keys =
        "Pause, single step\nReset\nNext dynamics\nDynamics by number\nSlower, faster\n"
        "Wave controller\nJoined links, every link\nScreenshot (cwd)\nHelp, overlay\nRotate, move view\nZoom\n"
        "Select body\nCentre, track\nPerturb\nFree camera\nQuit";
    static const char* what =
        "Space, Right\nBackspace\nB, Shift+B\n1-9\n-, =\nW\nJ\nP\nF1, F2\nleft, right drag\n"
        "scroll, middle drag\ndouble-click\nright double-click (+Ctrl)\nCtrl + left/right drag\n"
        "Esc\nCtrl+Q";
    mjr_overlay(mjFONT_NORMAL, mjGRID_TOPRIGHT, rect, keys, what, &v->con);
  }
}

// An extended chain (cfv_sim.ext): the scene's geoms of the model's moving bodies give way to the
// extended chain's links, each drawing the geoms of the body it repeats, and of the bodies welded
// to that one, as MuJoCo drew them there, moved to the link's pose (a link's frame is its body's).
// Not selectable: they are no model body.
static void add_extended_chain(viewer* v) {
  cfv_sim* s = v->sim;
  const mjModel* m = s->m;
  mjvScene* scn = &v->scn;
  if (!v->ext_next) return;  // out of memory at init: the model's own chain stays drawn
  memset(v->ext_have, 0, (size_t)m->ngeom);
  int kept = 0;
  for (int i = 0; i < scn->ngeom; i++) {
    const mjvGeom* g = scn->geoms + i;
    if (g->objtype == mjOBJ_GEOM && m->body_weldid[m->geom_bodyid[g->objid]] != 0) {
      v->ext_look[g->objid] = *g;
      v->ext_have[g->objid] = 1;
    } else {
      scn->geoms[kept++] = *g;
    }
  }
  scn->ngeom = kept;
  const double* xmat;
  const double* xpos = cfv_sim_ext_poses(s, &xmat);
  if (v->ext_join > 1 && !v->ext_every) {  // joined: a capsule from link i's origin to link j's end
    for (int i = 0; i < s->links && scn->ngeom < scn->maxgeom; i += v->ext_join) {
      int j = i + v->ext_join < s->links ? i + v->ext_join - 1 : s->links - 1;
      int middle = m->dof_bodyid[chainfd_rollout_link_dof(s->ext_cpu, (i + j) / 2)];
      int last = m->dof_bodyid[chainfd_rollout_link_dof(s->ext_cpu, j)];
      int g = v->ext_geom[middle];  // the middle link's look: colour bands shift by half a capsule
      if (!v->ext_have[g]) continue;  // hidden (--hide-moving)
      double to[3];
      mju_mulMatVec3(to, xmat + 9 * j, v->ext_tip + 3 * last);
      mju_addTo3(to, xpos + 3 * j);
      mjvGeom* out = scn->geoms + scn->ngeom;
      *out = v->ext_look[g];
      mjv_connector(out, m->geom_type[g], m->geom_size[3 * g], xpos + 3 * i, to);
      out->objtype = mjOBJ_UNKNOWN;
      out->objid = -1;
      out->segid = scn->ngeom++;
    }
    return;
  }
  for (int i = 0; i < s->links; i++) {
    int dof = chainfd_rollout_link_dof(s->ext_cpu, i), body = m->dof_bodyid[dof];
    // a body with several joints is several links in a row: its geoms go with the last of them
    if (i + 1 < s->links && chainfd_rollout_link_dof(s->ext_cpu, i + 1) == dof + 1 &&
        m->dof_bodyid[dof + 1] == body)
      continue;
    for (int b = v->ext_first[body]; b >= 0; b = v->ext_next[b]) {
      double Rb[9], pb[3];  // body b's world pose: the link's, then b's offset in it
      const double* rel = v->ext_rel + 12 * b;
      mju_mulMatMat(Rb, xmat + 9 * i, rel, 3, 3, 3);
      mju_mulMatVec3(pb, xmat + 9 * i, rel + 9);
      mju_addTo3(pb, xpos + 3 * i);
      for (int g = m->body_geomadr[b]; g < m->body_geomadr[b] + m->body_geomnum[b]; g++) {
        if (!v->ext_have[g] || scn->ngeom >= scn->maxgeom) continue;
        mjvGeom* out = scn->geoms + scn->ngeom;
        *out = v->ext_look[g];
        double R[9], gR[9], p[3];
        mju_quat2Mat(gR, m->geom_quat + 4 * g);
        mju_mulMatMat(R, Rb, gR, 3, 3, 3);
        mju_mulMatVec3(p, Rb, m->geom_pos + 3 * g);
        for (int k = 0; k < 3; k++) out->pos[k] = (float)(p[k] + pb[k]);
        for (int k = 0; k < 9; k++) out->mat[k] = (float)R[k];
        out->objtype = mjOBJ_UNKNOWN;
        out->objid = -1;
        out->segid = scn->ngeom++;
      }
    }
  }
}

static void render(viewer* v, mjrRect rect) {
  mjv_updateScene(v->sim->m, v->sim->d, &v->opt, &v->pert, &v->cam, mjCAT_ALL, &v->scn);
  if (v->sim->ext) add_extended_chain(v);
  mjr_render(rect, &v->scn, &v->con);
  if (v->show_overlay) draw_overlay(v, rect);
}

// The current framebuffer to a PNG (rows come bottom-up from OpenGL).
static int save_png(viewer* v, mjrRect rect, const char* path, unsigned char* rgb) {
  char err[512];
  mjr_readPixels(rgb, NULL, rect, &v->con);
  if (cfv_png_write(path, rgb, rect.width, rect.height, 1, err, sizeof err)) {
    fprintf(stderr, "chainfd-view: %s\n", err);
    return 1;
  }
  return 0;
}

// --hide-moving: every geom of a moving body goes into a group that is not drawn.
static void hide_moving_geoms(mjModel* m) {
  for (int i = 0; i < m->ngeom; i++)
    if (m->body_weldid[m->geom_bodyid[i]] != 0) m->geom_group[i] = HIDDEN_GROUP;
}

// --- the window: input ----------------------------------------------------------------------------------

static void next_dynamics(viewer* v, int step, int cycle) {
  cfv_sim* s = v->sim;
  char err[CFV_MSG];
  // cycling goes past a dynamics that cannot be selected (MuJoCo for an extended chain); a number
  // key that names one says why
  for (int tries = 0; tries < s->ndyn; tries++, step += step < 0 ? -1 : 1) {
    int i = ((s->current + step) % s->ndyn + s->ndyn) % s->ndyn;
    if (!cfv_sim_select(s, i, err, sizeof err)) {
      say("dynamics: %s (t = %.4f s)", cfv_sim_name(s), s->d->time);
      break;
    }
    if (!cycle) {
      say("%s", err);
      break;
    }
  }
  v->r.have = 0;  // fresh rates for the new dynamics
  v->r.t0 = cfv_now();
}

static void on_key(GLFWwindow* w, int key, int scancode, int action, int mods) {
  (void)scancode;
  viewer* v = glfwGetWindowUserPointer(w);
  cfv_sim* s = v->sim;
  if (action == GLFW_RELEASE) return;
  switch (key) {
    case GLFW_KEY_SPACE:
      if (action == GLFW_PRESS) {
        v->paused = !v->paused;
        if (v->paused) say("paused at t = %.4f s", s->d->time);
        else say("running");
      }
      break;
    case GLFW_KEY_RIGHT:
      if (v->paused && !timed_step(v)) say("step: t = %.4f s", s->d->time);
      break;
    case GLFW_KEY_BACKSPACE:
      cfv_sim_reset(s);
      v->pert.active = 0;
      v->resync = 1;
      say("reset");
      break;
    case GLFW_KEY_B:
      if (action == GLFW_PRESS) next_dynamics(v, (mods & GLFW_MOD_SHIFT) ? -1 : 1, 1);
      break;
    case GLFW_KEY_W:
      if (action == GLFW_PRESS && s->m->nu > 0 && s->wave_freq > 0) {
        s->wave = !s->wave;
        if (!s->wave) memcpy(s->d->ctrl, s->ctrl0, sizeof(double) * (size_t)s->m->nu);
        say("wave controller %s", s->wave ? "on" : "off");
      }
      break;
    case GLFW_KEY_J:
      if (action == GLFW_PRESS && s->ext && v->ext_join > 1) {
        v->ext_every = !v->ext_every;
        say("drawing %s", v->ext_every ? "every link" : "joined links");
      }
      break;
    case GLFW_KEY_EQUAL:
    case GLFW_KEY_KP_ADD:
      v->speed = fmin(v->speed * 2, 16);
      v->resync = 1;
      say("speed x%g", v->speed);
      break;
    case GLFW_KEY_MINUS:
    case GLFW_KEY_KP_SUBTRACT:
      v->speed = fmax(v->speed / 2, 1.0 / 64);
      v->resync = 1;
      say("speed x%g", v->speed);
      break;
    case GLFW_KEY_P:
      if (action == GLFW_PRESS) {
        int fw, fh;
        glfwGetFramebufferSize(w, &fw, &fh);
        unsigned char* rgb = malloc((size_t)fw * fh * 3);
        char path[64];
        snprintf(path, sizeof path, "chainfd-view-%03d.png", v->shots++);
        mjrRect rect = {0, 0, fw, fh};
        render(v, rect);
        if (rgb && !save_png(v, rect, path, rgb)) say("screenshot: %s", path);
        free(rgb);
      }
      break;
    case GLFW_KEY_F1:
      if (action == GLFW_PRESS) v->show_help = !v->show_help;
      break;
    case GLFW_KEY_F2:
      if (action == GLFW_PRESS) v->show_overlay = !v->show_overlay;
      break;
    case GLFW_KEY_ESCAPE:
      v->cam.type = mjCAMERA_FREE;
      v->pert.select = 0;
      v->pert.active = 0;
      break;
    case GLFW_KEY_Q:
      if (mods & GLFW_MOD_CONTROL) glfwSetWindowShouldClose(w, GLFW_TRUE);
      break;
    default:
      if (key >= GLFW_KEY_1 && key <= GLFW_KEY_9 && action == GLFW_PRESS &&
          key - GLFW_KEY_1 < s->ndyn)
        next_dynamics(v, key - GLFW_KEY_1 - s->current, 0);
  }
}

// Double-click: left selects the body under the cursor, right centres the camera on the point
// (Ctrl: and tracks the body).
static void double_click(viewer* v, int button, int mods) {
  const mjModel* m = v->sim->m;
  const mjData* d = v->sim->d;
  if (v->sim->ext) {  // MuJoCo's picking sees the model's bodies, not the extended chain's links
    say("an extended chain's links are no bodies of the model: they cannot be selected, "
        "perturbed or tracked");
    return;
  }
  int width, height;
  glfwGetWindowSize(v->win, &width, &height);
  mjtNum selpnt[3];
  int geom, flex, skin;
  int body = mjv_select(m, d, &v->opt, (mjtNum)width / height, v->lastx / width,
                        (height - v->lasty) / height, &v->scn, selpnt, &geom, &flex, &skin);
  char nm[128];
  if (button == GLFW_MOUSE_BUTTON_LEFT) {
    v->pert.select = body > 0 ? body : 0;
    v->pert.flexselect = flex;
    v->pert.skinselect = skin;
    v->pert.active = 0;
    if (body > 0) {  // the grabbed point in the body's frame, where the force will act
      mjtNum rel[3];
      mju_sub3(rel, selpnt, d->xpos + 3 * body);
      mju_mulMatTVec(v->pert.localpos, d->xmat + 9 * body, rel, 3, 3);
      say("selected body %s", body_name(m, body, nm, sizeof nm));
    } else {
      say("selected nothing");
    }
  } else if (button == GLFW_MOUSE_BUTTON_RIGHT && body >= 0) {
    mju_copy3(v->cam.lookat, selpnt);
    if ((mods & GLFW_MOD_CONTROL) && body > 0) {
      v->cam.type = mjCAMERA_TRACKING;
      v->cam.trackbodyid = body;
      v->cam.fixedcamid = -1;
      say("tracking body %s", body_name(m, body, nm, sizeof nm));
    } else {
      say("camera centred at (%.3f, %.3f, %.3f)", selpnt[0], selpnt[1], selpnt[2]);
    }
  }
}

static void on_button(GLFWwindow* w, int button, int action, int mods) {
  viewer* v = glfwGetWindowUserPointer(w);
  v->left = glfwGetMouseButton(w, GLFW_MOUSE_BUTTON_LEFT) == GLFW_PRESS;
  v->middle = glfwGetMouseButton(w, GLFW_MOUSE_BUTTON_MIDDLE) == GLFW_PRESS;
  v->right = glfwGetMouseButton(w, GLFW_MOUSE_BUTTON_RIGHT) == GLFW_PRESS;
  // the position is the one the last cursor event gave (the pointer is there before it clicks)
  if (action != GLFW_PRESS) {
    if (v->pert.active) {
      char nm[128];
      say("perturbation of body %s released (peak force %.3g N, torque %.3g N m)",
          body_name(v->sim->m, v->pert.select, nm, sizeof nm), v->peak_force, v->peak_torque);
    }
    v->pert.active = 0;
    return;
  }
  double now = glfwGetTime();
  if (button == v->last_button && now - v->last_click < DOUBLE_CLICK) {
    double_click(v, button, mods);
    v->last_click = 0;
  } else {
    v->last_click = now;
  }
  v->last_button = button;

  // Ctrl + drag on a selected body: left rotates it, right pulls it
  if ((mods & GLFW_MOD_CONTROL) && v->pert.select > 0 &&
      (button == GLFW_MOUSE_BUTTON_LEFT || button == GLFW_MOUSE_BUTTON_RIGHT)) {
    mjv_initPerturb(v->sim->m, v->sim->d, &v->scn, &v->pert);
    v->pert.active = button == GLFW_MOUSE_BUTTON_LEFT ? mjPERT_ROTATE : mjPERT_TRANSLATE;
    v->peak_force = v->peak_torque = 0;
  }
}

static void on_cursor(GLFWwindow* w, double x, double y) {
  viewer* v = glfwGetWindowUserPointer(w);
  double dx = x - v->lastx, dy = y - v->lasty;
  v->lastx = x;
  v->lasty = y;
  if (!v->left && !v->middle && !v->right) return;
  int width, height;
  glfwGetWindowSize(w, &width, &height);
  if (height <= 0) return;
  int shift = glfwGetKey(w, GLFW_KEY_LEFT_SHIFT) == GLFW_PRESS ||
              glfwGetKey(w, GLFW_KEY_RIGHT_SHIFT) == GLFW_PRESS;
  int action = v->right  ? (shift ? mjMOUSE_MOVE_H : mjMOUSE_MOVE_V)
               : v->left ? (shift ? mjMOUSE_ROTATE_H : mjMOUSE_ROTATE_V)
                         : mjMOUSE_ZOOM;
  if (v->pert.active)
    mjv_movePerturb(v->sim->m, v->sim->d, action, dx / height, dy / height, &v->scn, &v->pert);
  else
    mjv_moveCamera(v->sim->m, action, dx / height, dy / height, &v->cam);
}

static void on_scroll(GLFWwindow* w, double xoff, double yoff) {
  (void)xoff;
  viewer* v = glfwGetWindowUserPointer(w);
  mjv_moveCamera(v->sim->m, mjMOUSE_ZOOM, 0, -0.05 * yoff, &v->cam);
}

// --- the window: loop -----------------------------------------------------------------------------------

int cfv_run_window(cfv_sim* s, const cfv_view_opts* o) {
  viewer* v = calloc(1, sizeof(*v));
  if (!v) return 1;
  v->sim = s;
  v->o = o;
  v->speed = o->speed;
  v->show_overlay = o->overlay;
  v->resync = 1;
  if (o->hide_moving) hide_moving_geoms(s->m);

  char title[256];
  snprintf(title, sizeof title, "chainfd-view: %s", mj_id2name(s->m, mjOBJ_MODEL, 0)
                                                        ? mj_id2name(s->m, mjOBJ_MODEL, 0) : "");
  v->win = open_window(o->width, o->height, 1, title);
  if (!v->win) {
    free(v);
    return 1;
  }
  init_scene(v, mjFONTSCALE_150);
  glfwSetWindowUserPointer(v->win, v);
  glfwSetKeyCallback(v->win, on_key);
  glfwSetMouseButtonCallback(v->win, on_button);
  glfwSetCursorPosCallback(v->win, on_cursor);
  glfwSetScrollCallback(v->win, on_scroll);

  double start = cfv_now();
  v->r.t0 = start;
  long long frame = 0;
  int status = 0;
  while (!glfwWindowShouldClose(v->win)) {
    glfwPollEvents();
    if (o->switch_every > 0 && frame > 0 && frame % o->switch_every == 0) next_dynamics(v, 1, 1);
    advance_real_time(v);
    int fw, fh;
    glfwGetFramebufferSize(v->win, &fw, &fh);
    mjrRect rect = {0, 0, fw, fh};
    double t_draw = cfv_now();
    render(v, rect);
    glfwSwapBuffers(v->win);
    v->draw_time = cfv_now() - t_draw;
    update_rates(v, cfv_now());
    frame++;
    if (o->run_for > 0 && cfv_now() - start >= o->run_for) break;
  }
  printf("window: %lld frames in %.2f s, t = %.4f s, dynamics %s, state %s\n", frame,
         cfv_now() - start, s->d->time, cfv_sim_name(s), cfv_sim_finite(s) ? "finite" : "NOT FINITE");
  if (!cfv_sim_finite(s)) status = 1;
  free_scene(v);
  glfwDestroyWindow(v->win);
  glfwTerminate();
  free(v);
  return status;
}

// --- headless ------------------------------------------------------------------------------------------

// Whether a program is on PATH (ffmpeg is optional).
static int on_path(const char* prog) {
  const char* path = getenv("PATH");
  if (!path) return 0;
  char* copy = strdup(path);
  int found = 0;
  char* save = NULL;
  for (char* dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", dir, prog);
    found = access(full, X_OK) == 0;
  }
  free(copy);
  return found;
}

// s in single quotes for sh, inner quotes escaped
static void shell_quote(const char* s, char* out, size_t size) {
  size_t n = 0;
  if (size < 3) return;
  out[n++] = '\'';
  for (; *s && n + 5 < size; s++) {
    if (*s == '\'') {
      memcpy(out + n, "'\\''", 4);
      n += 4;
    } else {
      out[n++] = *s;
    }
  }
  out[n++] = '\'';
  out[n] = 0;
}

static FILE* open_video(const cfv_view_opts* o) {
  if (!on_path("ffmpeg")) {
    fprintf(stderr, "chainfd-view: ffmpeg is not installed: no video, PNG frames only\n");
    return NULL;
  }
  // OpenGL rows are bottom-up (vflip); yuv420p wants even sizes (scale)
  char path[4096 + 16], quoted[2 * sizeof path], cmd[sizeof quoted + 512];
  snprintf(path, sizeof path, "%s/chainfd.mp4", o->out);
  shell_quote(path, quoted, sizeof quoted);
  snprintf(cmd, sizeof cmd,
           "ffmpeg -loglevel error -y -f rawvideo -pix_fmt rgb24 -s %dx%d -r %g -i - "
           "-vf 'vflip,scale=trunc(iw/2)*2:trunc(ih/2)*2' -c:v libx264 -pix_fmt yuv420p %s",
           o->width, o->height, o->fps, quoted);
  FILE* f = popen(cmd, "w");
  if (!f) fprintf(stderr, "chainfd-view: cannot start ffmpeg: %s\n", strerror(errno));
  return f;
}

// mkdir -p
static int make_dirs(const char* path) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char* p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0777) && errno != EEXIST) return 1;
    *p = '/';
  }
  return mkdir(buf, 0777) && errno != EEXIST;
}

int cfv_run_headless(cfv_sim* s, const cfv_view_opts* o) {
  if (o->out && make_dirs(o->out)) {
    fprintf(stderr, "chainfd-view: cannot create '%s': %s\n", o->out, strerror(errno));
    return 1;
  }
  viewer* v = calloc(1, sizeof(*v));
  unsigned char* rgb = malloc((size_t)o->width * o->height * 3);
  if (!v || !rgb) {
    free(v);
    free(rgb);
    return 1;
  }
  v->sim = s;
  v->o = o;
  v->headless = 1;
  v->speed = 1;  // frames are 1/fps simulated seconds apart
  v->show_overlay = o->overlay;
  if (o->hide_moving) hide_moving_geoms(s->m);
  // the offscreen buffer is sized from the model's visual settings when the context is made
  s->m->vis.global.offwidth = o->width;
  s->m->vis.global.offheight = o->height;

  // the context: a hidden GLFW window, or EGL where there is no X server (a GPU server)
  const char* gl = o->gl && strcmp(o->gl, "auto") ? o->gl : getenv("DISPLAY") ? "glfw" : "egl";
  char context[256] = "GLFW";
  int use_egl = !strcmp(gl, "egl");
  if (use_egl && cfv_egl_make_current(context, sizeof context)) {
    fprintf(stderr, "chainfd-view: --gl egl: %s%s\n", context,
            getenv("DISPLAY") ? "" : " (with an X server, --gl glfw)");
    use_egl = 0;
  } else if (!use_egl) {
    v->win = open_window(64, 64, 0, "chainfd-view (headless)");
  }
  double* times = calloc(2 * (size_t)o->frames, sizeof(double));  // per frame: steps, drawing
  if ((!use_egl && !v->win) || !times) {
    if (!times) fprintf(stderr, "chainfd-view: out of memory for %d frames' timings\n", o->frames);
    if (use_egl) cfv_egl_release();
    if (v->win) {
      glfwDestroyWindow(v->win);
      glfwTerminate();
    }
    free(times);
    free(v);
    free(rgb);
    return 1;
  }
  init_scene(v, mjFONTSCALE_100);
  mjr_setBuffer(mjFB_OFFSCREEN, &v->con);
  int status = 0;
  if (v->con.currentBuffer != mjFB_OFFSCREEN) {
    fprintf(stderr, "chainfd-view: this OpenGL context has no offscreen framebuffer\n");
    status = 1;
  }
  FILE* video = (status == 0 && o->video && o->out) ? open_video(o) : NULL;

  // frames advance simulated time, not wall time: the same frames on any machine
  int per_frame = (int)fmax(1, round(1.0 / (o->fps * s->m->opt.timestep)));
  v->per_frame = per_frame;
  int warmup = (int)round(o->warmup / s->m->opt.timestep);
  v->r.t0 = cfv_now();
  if (status == 0) status = run_steps(v, warmup);

  mjrRect rect = {0, 0, o->width, o->height};
  for (int f = 0; f < o->frames && status == 0; f++) {
    double start = cfv_now();
    if (f > 0) {
      if (o->switch_every > 0 && f % o->switch_every == 0) next_dynamics(v, 1, 1);
      double t0 = s->d->time;
      status = run_steps(v, per_frame);
      if (status) break;
      if (!(s->d->time > t0) || !cfv_sim_finite(s)) {
        fprintf(stderr, "chainfd-view: frame %d with %s: time %.6f -> %.6f, state %s\n", f,
                cfv_sim_name(s), t0, s->d->time, cfv_sim_finite(s) ? "finite" : "NOT FINITE");
        status = 1;
        break;
      }
    }
    double drawn = cfv_now();
    times[f] = drawn - start;
    update_rates(v, drawn);
    render(v, rect);
    if (o->out) {
      char path[4096];
      snprintf(path, sizeof path, "%s/frame_%05d.png", o->out, f);
      status = save_png(v, rect, path, rgb);
      if (video && !status && fwrite(rgb, 1, (size_t)o->width * o->height * 3, video) == 0)
        fprintf(stderr, "chainfd-view: ffmpeg stopped taking frames\n");
    } else {
      mjr_readPixels(rgb, NULL, rect, &v->con);  // the read-back waits for the drawing to end
    }
    times[o->frames + f] = cfv_now() - drawn;
  }
  if (video && pclose(video) != 0) fprintf(stderr, "chainfd-view: ffmpeg failed; no video\n");
  if (status == 0) {
    char drawn[96];
    drawing_mode(v, drawn, sizeof drawn);
    printf("headless: %d frames %dx%d%s%s, t = %.4f s, dynamics %s, %lld steps (%lld by MuJoCo "
           "for a chainfd back end), state %s%s%.*s\n",
           o->frames, o->width, o->height, o->out ? " -> " : "", o->out ? o->out : "", s->d->time,
           cfv_sim_name(s), s->steps, s->mujoco_steps,
           cfv_sim_finite(s) ? "finite" : "NOT FINITE", drawn[0] ? ", drawn: " : "",
           (int)(strlen(drawn) > 5 ? strlen(drawn) - 5 : 0), drawn);
    // the frames after the first (which makes the buffers): median wall time of a frame's steps,
    // and of its drawing with the read-back (a PNG's encoding included when --out is given)
    int n = o->frames - 1;
    if (n > 0)
      printf("headless: per frame (median of %d): steps %.3f ms, drawing %.3f ms (%s%s)\n", n,
             1e3 * cfd_median(times + 1, n), 1e3 * cfd_median(times + o->frames + 1, n), context,
             o->out ? ", PNG encoding included" : "");
  }
  if (status == 0 && !cfv_sim_finite(s)) status = 1;
  free_scene(v);
  if (use_egl) {
    cfv_egl_release();
  } else {
    glfwDestroyWindow(v->win);
    glfwTerminate();
  }
  free(times);
  free(v);
  free(rgb);
  return status;
}
