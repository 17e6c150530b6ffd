// The viewer's simulation: dynamics switching, the wave controller and the benchmark loop.
//
// chainfd back ends are driven through the plugin library's public stepper API, one stepper per
// back end, all made up front, so that switching is instant and a back end that refuses the
// model is known (and listed as such) before it is picked. The steppers run with fallback=error
// so that the viewer itself decides what a refused step becomes (MuJoCo's mj_step), counts it and
// shows why, instead of a line on stderr.
#define _POSIX_C_SOURCE 199309L  // clock_gettime

#include "sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mujoco/mjplugin.h>

#include "chain_gen.h"

double cfv_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Back ends the viewer offers, in cycling order. The cuda.* ones appear only when this build's
// stepper accepts them and they can compute the model here (a GPU is present): a CPU back end that
// refuses the model is still listed, since its refusal (shown in the overlay) is worth seeing.
static const char* const candidates[] = {"cpu.fast", "cpu.abia",  "cpu.jsiia", "cpu.cfa",
                                         "cuda.abia", "cuda.jsiia", "cuda.cfa"};

mjModel* cfv_load(const char* path_or_spec, char* err, int err_size) {
  if (!path_or_spec || !path_or_spec[0]) {
    snprintf(err, err_size, "no model given");
    return NULL;
  }
  if (strncmp(path_or_spec, "chain:", 6) != 0) {
    // a clear "no such file" rather than the XML parser's wording
    FILE* f = fopen(path_or_spec, "rb");
    if (!f) {
      snprintf(err, err_size, "cannot open '%s'", path_or_spec);
      return NULL;
    }
    fclose(f);
    size_t len = strlen(path_or_spec);
    if (len > 4 && !strcmp(path_or_spec + len - 4, ".mjb")) {
      mjModel* m = mj_loadModel(path_or_spec, NULL);
      if (!m) snprintf(err, err_size, "'%s' is not a MuJoCo binary model (.mjb) of this version",
                       path_or_spec);
      return m;
    }
  }
  return cfd_load_model(path_or_spec, err, err_size);
}

// the model's joints of every type (a ball or free joint is one link of several dofs); an
// extended chain, whose joints are all hinges and slides, has as many links as dofs
static int count_links(const mjModel* m) { return (int)m->njnt; }


// Resolves a back-end name (short or full) to the table name the stepper would use.
static int resolve(const mjModel* m, const chainfd_config* cfg, char* name, int size, char* err,
                   int err_size) {
  chainfd_stepper* st = chainfd_stepper_create(m, cfg, "chainfd-view", err, err_size);
  if (!st) return 1;
  chainfd_stats stats;
  chainfd_stepper_stats(st, &stats);
  snprintf(name, size, "%s", stats.backend);
  chainfd_stepper_free(st);
  return 0;
}

int cfv_sim_find(cfv_sim* s, const char* name, char* err, int err_size) {
  for (int i = 0; i < s->ndyn; i++)
    if (!strcmp(name, s->dyn_name[i])) return i;
  char resolved[64], why[CFV_MSG];
  chainfd_config cfg = {name, NULL, NULL, "error"};
  if (!resolve(s->m, &cfg, resolved, sizeof resolved, why, sizeof why)) {
    for (int i = 1; i < s->ndyn; i++)
      if (!strcmp(resolved, s->dyn_name[i])) return i;
    snprintf(why, sizeof why, "it resolves to '%s', which cannot run here", resolved);
  }
  int len = snprintf(err, err_size, "unknown dynamics '%s' (%s); available:", name, why);
  for (int i = s->ext ? 1 : 0; i < s->ndyn && len < err_size; i++)  // (extended: never MuJoCo)
    len += snprintf(err + len, err_size - len, " %s", s->dyn_name[i]);
  if (s->unavailable[0] && len < err_size)
    snprintf(err + len, err_size - len, "; not here: %s", s->unavailable);
  return -1;
}

// The extended chain of <numeric name="chainfd_extend" data="LINKS"/>: its rollouts on the CPU and,
// where cuda.abia is offered, the GPU, and its dynamics list (cpu.fast, cuda.abia; MuJoCo cannot
// compile such a chain). 0, or nonzero with err set.
static int init_extended(cfv_sim* s, int links, int gpu, char* err, int err_size) {
  const mjModel* m = s->m;
  s->ext = 1;
  char why[CFV_MSG];
  if (chainfd_rollout_create_extended(m, links, CHAINFD_CPU, &s->ext_cpu, why, sizeof why)) {
    snprintf(err, err_size, "chainfd_extend=%d: %s", links, why);
    return 1;
  }
  if (gpu && chainfd_rollout_create_extended(m, links, 0, &s->ext_gpu, why, sizeof why)) {
    snprintf(s->unavailable, sizeof s->unavailable, "cuda.abia (%s)", why);
    s->ext_gpu = NULL;
  }
  s->links = links;
  s->ext_x = malloc(sizeof(double) * 4 * (size_t)links);
  s->ext_xpos = malloc(sizeof(double) * 12 * (size_t)links);
  if (!s->ext_x || !s->ext_xpos) {
    snprintf(err, err_size, "out of memory for a chain of %d links", links);
    return 1;
  }
  s->ext_x1 = s->ext_x + 2 * (size_t)links;
  s->ext_xmat = s->ext_xpos + 3 * (size_t)links;
  // the list: index 0 stays MuJoCo's name, never selected (cfv_sim_select says why)
  s->ndyn = 1;
  s->dyn_name[s->ndyn++] = "cpu.fast";
  if (s->ext_gpu) s->dyn_name[s->ndyn++] = "cuda.abia";
  size_t len = strlen(s->unavailable);
  snprintf(s->unavailable + len, sizeof s->unavailable - len,
           "%smujoco (MuJoCo compiles body trees to depth 1023: not a chain of %d links)",
           len ? "; " : "", links);
  return 0;
}

int cfv_sim_init(cfv_sim* s, mjModel* m, const char* backend, int key, char* err, int err_size) {
  memset(s, 0, sizeof(*s));
  s->m = m;
  s->links = count_links(m);
  s->key = key < m->nkey ? key : -1;
  s->d = mj_makeData(m);
  s->ctrl0 = calloc((size_t)m->nu + 1, sizeof(double));
  s->saved = malloc(sizeof(mjtNum) * (size_t)(mj_stateSize(m, mjSTATE_INTEGRATION) + 1));
  if (!s->d || !s->ctrl0 || !s->saved) {
    snprintf(err, err_size, "out of memory making mjData");
    return 1;
  }

  s->dyn_name[s->ndyn++] = "mujoco";
  mjData* probe = NULL;  // where a GPU back end computes one forward before it is listed
  for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
    char label[64], why[CFV_MSG] = "";
    snprintf(label, sizeof label, "chainfd-view %s", candidates[i]);
    chainfd_config cfg = {candidates[i], NULL, NULL, "error"};
    chainfd_stepper* st = chainfd_stepper_create(m, &cfg, label, why, sizeof why);
    if (!st) continue;  // not in this build
    if (strncmp(candidates[i], "cpu.", 4) != 0) {
      if (!probe) probe = mj_makeData(m);
      if (s->key >= 0) mj_resetDataKeyframe(m, probe, s->key);
      if (!probe || chainfd_stepper_forward(st, m, probe)) {
        chainfd_stats stats;
        chainfd_stepper_stats(st, &stats);
        snprintf(why, sizeof why, "%s", stats.last_fallback[0] ? stats.last_fallback
                                                                : chainfd_last_error());
        chainfd_stepper_free(st);
        st = NULL;
      }
    }
    if (!st) {  // not on this machine, or not for this model
      size_t len = strlen(s->unavailable);
      if (len + 8 < sizeof s->unavailable)
        snprintf(s->unavailable + len, sizeof s->unavailable - len, "%s%s (%s)", len ? "; " : "",
                 candidates[i], why);
      continue;
    }
    s->dyn_name[s->ndyn] = candidates[i];
    s->stepper[s->ndyn++] = st;
  }
  if (probe) mj_deleteData(probe);

  // an extended chain: its own dynamics list replaces the one above
  int extend = mj_name2id(m, mjOBJ_NUMERIC, "chainfd_extend");
  if (extend >= 0) {
    double links = m->numeric_size[extend] >= 1 ? m->numeric_data[m->numeric_adr[extend]] : 0;
    if (!(links >= 2 && links <= CHAINFD_MAX_EXTENDED_LINKS && links == floor(links))) {
      snprintf(err, err_size, "chainfd_extend: %g is not a number of links (2 to %d)", links,
               CHAINFD_MAX_EXTENDED_LINKS);
      return 1;
    }
    if (links <= s->links) {
      snprintf(err, err_size, "chainfd_extend: %g links is no longer than the model's own %d",
               links, s->links);
      return 1;
    }
    int gpu = 0;
    for (int i = 0; i < s->ndyn; i++) gpu |= !strcmp(s->dyn_name[i], "cuda.abia");
    for (int i = 1; i < s->ndyn; i++) chainfd_stepper_free(s->stepper[i]);
    memset(s->stepper, 0, sizeof s->stepper);
    // of the reasons a back end is not offered, only cuda.abia's still matter
    char* abia = strstr(s->unavailable, "cuda.abia (");
    char kept[2 * CFV_MSG] = "";
    if (abia) {
      snprintf(kept, sizeof kept, "%s", abia);
      char* end = strstr(kept, "); ");
      if (end) end[1] = 0;
    }
    snprintf(s->unavailable, sizeof s->unavailable, "%s", kept);
    if (init_extended(s, (int)links, gpu, err, err_size)) return 1;
    s->current = 1;
    if (backend && !strcmp(backend, "mujoco")) {
      snprintf(err, err_size, "MuJoCo cannot step this model's chain of %d links", s->links);
      return 1;
    }
    if (backend && (s->current = cfv_sim_find(s, backend, err, err_size)) < 0) return 1;
    if (s->current == 0) s->current = 1;
    cfv_sim_reset(s);
    return 0;
  }

  // the starting dynamics: asked for, or the model's plugin configuration, or cpu.fast
  int instance = cfd_plugin_instance(m, CHAINFD_PLUGIN_NAME);
  int pick = -1;
  if (backend) {
    pick = cfv_sim_find(s, backend, err, err_size);
    if (pick < 0) return 1;
  } else if (instance >= 0) {
    chainfd_config cfg = {cfd_plugin_config(m, instance, "backend"), cfd_plugin_config(m, instance, "precision"),
                          cfd_plugin_config(m, instance, "device"), "error"};
    char resolved[64], why[CFV_MSG];
    if (resolve(m, &cfg, resolved, sizeof resolved, why, sizeof why))
      fprintf(stderr, "chainfd-view: the model's chainfd configuration is not usable here (%s); "
                      "starting with cpu.fast\n", why);
    else
      pick = cfv_sim_find(s, resolved, why, sizeof why);
  }
  if (pick < 0) pick = s->ndyn > 1 ? 1 : 0;
  s->current = pick;

  // a model may ask for the wave controller: <numeric name="chainfd_wave" data="amp freq len [odd]"/>
  int wave = mj_name2id(m, mjOBJ_NUMERIC, "chainfd_wave");
  if (wave >= 0 && m->numeric_size[wave] >= 3 && m->nu > 0) {
    const mjtNum* p = m->numeric_data + m->numeric_adr[wave];
    s->wave = 1;
    s->wave_amp = p[0];
    s->wave_freq = p[1];
    s->wave_len = p[2];
    s->wave_odd = m->numeric_size[wave] >= 4 ? p[3] : 0;
  }
  // the CPU rollout for cfv_sim_substeps, where the model fits it
  s->rollout_x = malloc(sizeof(double) * (size_t)(4 * m->nv + 1));  // start, end (2 nv each)
  s->rollout_ctrl = malloc(sizeof(double) * ((size_t)CFV_MAX_SUBSTEPS * m->nu + 1));
  if (!s->rollout_x || !s->rollout_ctrl) {
    snprintf(err, err_size, "out of memory");
    return 1;
  }
  if (chainfd_rollout_create(m, CHAINFD_CPU, &s->rollout, s->rollout_why, sizeof s->rollout_why))
    s->rollout = NULL;
  // and the GPU rollout for cuda.abia's, where that back end is offered (a GPU is present)
  char why[CFV_MSG];
  if (s->rollout && cfv_sim_find(s, "cuda.abia", why, sizeof why) >= 0 &&
      chainfd_rollout_create(m, 0, &s->rollout_gpu, why, sizeof why))
    s->rollout_gpu = NULL;
  cfv_sim_reset(s);
  return 0;
}

void cfv_sim_free(cfv_sim* s) {
  if (s->ext_cpu) chainfd_rollout_free(s->ext_cpu);
  if (s->ext_gpu) chainfd_rollout_free(s->ext_gpu);
  free(s->ext_x);
  free(s->ext_xpos);
  if (s->rollout) chainfd_rollout_free(s->rollout);
  if (s->rollout_gpu) chainfd_rollout_free(s->rollout_gpu);
  free(s->rollout_x);
  free(s->rollout_ctrl);
  for (int i = 0; i < s->ndyn; i++) chainfd_stepper_free(s->stepper[i]);
  if (s->d) mj_deleteData(s->d);
  if (s->m) mj_deleteModel(s->m);
  free(s->ctrl0);
  free(s->saved);
  memset(s, 0, sizeof(*s));
}

const char* cfv_sim_name(const cfv_sim* s) { return s->dyn_name[s->current]; }

int cfv_sim_select(cfv_sim* s, int i, char* err, int err_size) {
  if (i < 0 || i >= s->ndyn) {
    snprintf(err, err_size, "no dynamics #%d", i);
    return 1;
  }
  if (s->ext && i == 0) {
    snprintf(err, err_size, "MuJoCo cannot step a chain of %d links", s->links);
    return 1;
  }
  s->current = i;
  s->fallback_why[0] = 0;
  return 0;
}

// The extended chain's state from d: each link takes the value of the model joint it repeats.
static void ext_state_from_model(cfv_sim* s) {
  const mjModel* m = s->m;
  int n = s->links;
  for (int i = 0; i < n; i++) {
    int dof = chainfd_rollout_link_dof(s->ext_cpu, i);
    s->ext_x[i] = s->d->qpos[m->jnt_qposadr[m->dof_jntid[dof]]];
    s->ext_x[n + i] = s->d->qvel[dof];
  }
  s->ext_posed = 0;
}

void cfv_sim_reset(cfv_sim* s) {
  if (s->key >= 0) mj_resetDataKeyframe(s->m, s->d, s->key);
  else mj_resetData(s->m, s->d);
  s->diverged = 0;
  if (s->ext) {
    ext_state_from_model(s);
    mj_forward(s->m, s->d);  // the rest of the scene
    return;
  }
  if (s->m->nu) memcpy(s->ctrl0, s->d->ctrl, sizeof(double) * (size_t)s->m->nu);
  cfv_sim_forward(s);
}

// Controls from the travelling wave at time t, into u (nu); amplitude ramped in over one period so
// the servos do not jump at t = 0.
static void wave_ctrl(const cfv_sim* s, double t, double* out) {
  const mjModel* m = s->m;
  double ramp = s->wave_freq > 0 ? fmin(1.0, t * s->wave_freq) : 1.0;
  double amp = s->wave_amp * ramp * ramp * (3 - 2 * ramp);  // smoothstep
  double len = s->wave_len != 0 ? s->wave_len : 1e30;
  for (int i = 0; i < m->nu; i++) {
    double phase = s->wave_freq * t - i / len + ((i & 1) ? s->wave_odd : 0.0);
    double u = s->ctrl0[i] + amp * sin(2 * mjPI * phase);
    if (m->actuator_ctrllimited[i]) {
      const double* r = m->actuator_ctrlrange + 2 * i;
      u = fmin(fmax(u, r[0]), r[1]);
    }
    out[i] = u;
  }
}

static void apply_wave(cfv_sim* s) { wave_ctrl(s, s->d->time, s->d->ctrl); }

int cfv_sim_forward(cfv_sim* s) {
  if (s->ext) return 0;  // nothing derived beyond the poses, made when drawn
  if (s->wave) apply_wave(s);
  if (s->current == 0) {
    mj_forward(s->m, s->d);
    return 0;
  }
  int rc = chainfd_stepper_forward(s->stepper[s->current], s->m, s->d);
  if (rc == CHAINFD_ERR_UNSUPPORTED) mj_forward(s->m, s->d);
  else if (rc) {
    snprintf(s->error, sizeof s->error, "%s", chainfd_last_error());
    return rc;
  }
  return 0;
}

// MuJoCo's bad-state warnings (each also reset the state to qpos0, which clears the counters and
// counts again: compare them for any change, not for growth).
typedef struct warnings {
  int pos, vel, acc;
} warnings;

static warnings bad_warnings(const mjData* d) {
  warnings w = {d->warning[mjWARN_BADQPOS].number, d->warning[mjWARN_BADQVEL].number,
                d->warning[mjWARN_BADQACC].number};
  return w;
}

static int changed(warnings a, warnings b) { return a.pos != b.pos || a.vel != b.vel || a.acc != b.acc; }

// Finite and below MuJoCo's own bound for "huge" (mjMAXVAL), as mj_checkPos/Vel/Acc judge it.
static int sane(const mjModel* m, const mjData* d) {
  for (int i = 0; i < m->nq; i++)
    if (!(fabs(d->qpos[i]) < mjMAXVAL)) return 0;
  for (int i = 0; i < m->nv; i++)
    if (!(fabs(d->qvel[i]) < mjMAXVAL) || !(fabs(d->qacc[i]) < mjMAXVAL)) return 0;
  return 1;
}

// MuJoCo's own step; a bad state it had to reset is remembered (cfv_sim_finite).
static void mujoco_step(cfv_sim* s) {
  warnings w0 = bad_warnings(s->d);
  mj_step(s->m, s->d);
  if (changed(w0, bad_warnings(s->d))) s->diverged = 1;
}

// k steps of the extended chain with the current dynamics' rollout. Returns k, or 0 with s->error
// set when the rollout fails; a bad state the rollout reset (as mj_step would) marks the run
// diverged.
static int ext_steps(cfv_sim* s, int k) {
  chainfd_rollout* r = !strcmp(cfv_sim_name(s), "cuda.abia") ? s->ext_gpu : s->ext_cpu;
  char err[CFV_MSG];
  if (chainfd_rollout_run(r, 1, k, s->ext_x, 1, NULL, s->ext_x1, 1, CHAINFD_HOST, err, sizeof err)) {
    snprintf(s->error, sizeof s->error, "%s", err);
    return 0;
  }
  if (chainfd_rollout_warnings(r) > 0) s->diverged = 1;
  memcpy(s->ext_x, s->ext_x1, sizeof(double) * 2 * (size_t)s->links);
  s->ext_posed = 0;
  for (int j = 0; j < k; j++) s->d->time += s->m->opt.timestep;  // as k steps of mj_step
  s->steps += k;
  return k;
}

int cfv_sim_dofs(const cfv_sim* s) { return s->ext ? s->links : (int)s->m->nv; }

const double* cfv_sim_ext_poses(cfv_sim* s, const double** xmat) {
  if (!s->ext) return NULL;
  if (!s->ext_posed) chainfd_rollout_link_poses(s->ext_cpu, s->ext_x, s->ext_xpos, s->ext_xmat);
  s->ext_posed = 1;
  *xmat = s->ext_xmat;
  return s->ext_xpos;
}

int cfv_sim_step(cfv_sim* s) {
  if (s->ext) return ext_steps(s, 1) ? 0 : 1;
  if (s->wave) apply_wave(s);
  s->steps++;
  if (s->current == 0) {
    mujoco_step(s);
    return 0;
  }
  chainfd_stepper* st = s->stepper[s->current];
  mjModel* m = s->m;
  mjData* d = s->d;
  warnings w0 = bad_warnings(d);
  double t0 = d->time;
  mj_getState(m, d, s->saved, mjSTATE_INTEGRATION);
  int rc = chainfd_stepper_step(st, m, d);
  if (rc == CHAINFD_ERR_UNSUPPORTED) {
    // refused with the integration state untouched: MuJoCo takes this step
    chainfd_stats stats;
    chainfd_stepper_stats(st, &stats);
    snprintf(s->fallback_why, sizeof s->fallback_why, "%s", stats.last_fallback);
    mujoco_step(s);
    s->mujoco_steps++;
    return 0;
  }
  if (rc == CHAINFD_OK && (changed(w0, bad_warnings(d)) || !(d->time > t0) || !sane(m, d))) {
    // The back end failed on this state (a non-finite or huge qacc, or a state that blew up), and
    // MuJoCo, as mj_step would, reset it to qpos0 or will at the next step. Undo the step and let
    // MuJoCo take it: if the dynamics itself blows up, MuJoCo resets just the same; if it was the
    // back end, the simulation goes on, and the overlay says which back end failed, and when.
    mj_setState(m, d, s->saved, mjSTATE_INTEGRATION);
    snprintf(s->fallback_why, sizeof s->fallback_why,
             "%s failed at t = %.4f s (its qacc or the stepped state was not finite); MuJoCo took "
             "the step", cfv_sim_name(s), t0);
    mujoco_step(s);
    s->mujoco_steps++;
    return 0;
  }
  if (rc) {
    snprintf(s->error, sizeof s->error, "%s", chainfd_last_error());
    s->steps--;
  }
  return rc;
}

int cfv_sim_substeps(cfv_sim* s, int k) {
  const mjModel* m = s->m;
  mjData* d = s->d;
  if (s->current == 0 || k < 1 || k > CFV_MAX_SUBSTEPS) return 0;
  if (s->ext) return ext_steps(s, k);  // (a failure: cfv_sim_step then reports it)
  const char* name = s->dyn_name[s->current];
  chainfd_rollout* rollout = !strcmp(name, "cpu.fast")    ? s->rollout
                             : !strcmp(name, "cuda.abia") ? s->rollout_gpu
                                                          : NULL;
  if (!rollout) return 0;
  for (int i = 0; i < 6 * m->nbody; i++)
    if (d->xfrc_applied[i] != 0) return 0;
  for (int i = 0; i < m->nv; i++)
    if (d->qfrc_applied[i] != 0) return 0;
  double h = m->opt.timestep;
  for (int j = 0; j < k; j++) {  // the controls each step would see (cfv_sim_step: wave first)
    double* u = s->rollout_ctrl + (size_t)j * m->nu;
    if (s->wave) wave_ctrl(s, d->time + j * h, u);
    else if (m->nu) memcpy(u, d->ctrl, sizeof(double) * m->nu);
  }
  char err[CFV_MSG];
  int nx = 2 * m->nv;  // the rollout state: qpos per dof (a ball's rotation vector), qvel
  double *x0 = s->rollout_x, *x1 = s->rollout_x + nx;
  chainfd_rollout_get_state(m, d, x0);
  if (chainfd_rollout_run(rollout, 1, k, x0, 1, s->rollout_ctrl, x1, 1, CHAINFD_HOST, err, sizeof err))
    return 0;
  for (int i = 0; i < nx; i++)
    if (!(fabs(x1[i]) < mjMAXVAL)) return 0;  // cfv_sim_step will see to it
  chainfd_rollout_set_state(m, d, x1);
  if (m->nu) memcpy(d->ctrl, s->rollout_ctrl + (size_t)(k - 1) * m->nu, sizeof(double) * m->nu);
  for (int j = 0; j < k; j++) d->time += h;  // as k steps of mj_step advance it
  mj_kinematics(m, d);
  mj_comPos(m, d);
  s->steps += k;
  return k;
}

int cfv_sim_finite(const cfv_sim* s) {
  if (s->ext) {
    for (int i = 0; i < 2 * s->links; i++)
      if (!(fabs(s->ext_x[i]) < mjMAXVAL)) return 0;
    return !s->diverged;
  }
  return sane(s->m, s->d) && !s->diverged;
}

int cfv_sim_benchmark(cfv_sim* s, double seconds, int substeps) {
  // from the start state, no warm-up: then a failure or fallback is reported with the state it
  // happened in, and the run is reproducible up to where the wall clock stops it
  cfv_sim_reset(s);
  long long steps = 0, mujoco0 = s->mujoco_steps;
  double start = cfv_now(), wall = 0;
  long long substepped = 0;
  do {
    // a frame's worth of steps at a time, as the window steps (cfv_sim_substeps where it applies)
    int k = substeps > 1 ? cfv_sim_substeps(s, substeps) : 0;
    if (k) {
      steps += k;
      substepped += k;
    } else {
      if (cfv_sim_step(s)) {
        fprintf(stderr, "chainfd-view: %s\n", s->error);
        return 1;
      }
      steps++;
    }
    wall = cfv_now() - start;
  } while (wall < seconds);

  // simulated time as steps * h: MuJoCo's bad-state reset would rewind d->time
  double sim = (double)steps * s->m->opt.timestep;
  printf("backend=%s links=%d dofs=%d steps=%lld sim=%.4gs wall=%.3gs step_us=%.4g rtf=%.4g",
         cfv_sim_name(s), s->links, cfv_sim_dofs(s), steps, sim, wall, 1e6 * wall / (double)steps,
         sim / wall);
  if (substepped) printf(" substeps=%d rollout_steps=%lld", substeps, substepped);
  if (s->mujoco_steps > mujoco0)
    printf(" mujoco_steps=%lld (last: %s)", s->mujoco_steps - mujoco0, s->fallback_why);
  if (!cfv_sim_finite(s)) printf(" DIVERGED");
  printf("\n");
  fflush(stdout);
  return 0;
}
