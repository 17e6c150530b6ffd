// chainfd_rollout against mj_step (the CPU rollout, label cpu) and the GPU rollout against the CPU
// rollout (label gpu: exit 77, SKIPPED, without a CUDA device); extended chains (longer than MuJoCo
// compiles) against the chain MuJoCo builds of the same links; and the rollout's refusals.
#include <pthread.h>
#include <stdlib.h>

#include "chain_gen.h"
#include "chainfd_rollout.h"
#include "rollout_internal.h"
#include "mj_chain.h"
#include "mj_random.h"
#include "test_util.h"

// The largest difference relative to the entries' size (at least 1), NaN-aware: 0 where both are
// NaN or equal (infinities too), infinite where only one is NaN
// The GPU rollouts' tuning in the cases below (a kernel forced to check it too), set on each GPU
// rollout as it is made; the steps the scan kernel took in the rollouts freed so far.
static cfd_gpu_tuning tuning;
static long scan_steps;

static chainfd_rollout* tuned(chainfd_rollout* r) {
  char err[256];
  if (r) EXPECT(cfd_rollout_set_tuning(r, &tuning, err, sizeof err) == 0, "%s", err);
  return r;
}

static void release(chainfd_rollout* r) {
  if (r) scan_steps += cfd_rollout_scan_steps(r);
  chainfd_rollout_free(r);
}

static double rel_diff_nan(const double* a, const double* b, size_t count) {
  double worst = 0;
  for (size_t k = 0; k < count; k++) {
    if (a[k] == b[k] || (isnan(a[k]) && isnan(b[k]))) continue;
    double e = isnan(a[k]) || isnan(b[k]) ? INFINITY
                                          : fabs(a[k] - b[k]) / fmax(1, fmax(fabs(a[k]), fabs(b[k])));
    worst = cfd_worst(worst, e);
  }
  return worst;
}

// B random starts (MuJoCo's random states from qpos0) and controls in [-1, 1] for H steps
static void random_inputs(const mjModel* m, mjData* d, int B, int H, unsigned long long seed,
                          double* init, double* ctrl) {
  cfd_rng rng = {seed};
  for (int b = 0; b < B; b++) {
    mj_resetData(m, d);
    cfd_random_state(m, d, &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL);
    chainfd_rollout_get_state(m, d, init + (size_t)b * 2 * m->nv);
  }
  for (size_t k = 0; k < (size_t)B * H * m->nu; k++) ctrl[k] = cfd_rng_uniform(&rng, -1, 1);
}

// whether some entry is NaN or past 1e10 (MuJoCo's mju_isBad)
static int any_bad(const double* x, int count) {
  for (int k = 0; k < count; k++)
    if (!(fabs(x[k]) <= 1e10)) return 1;
  return 0;
}

// Bad states and controls planted in instance b of a batch (b % 5): 1 a NaN qpos, 2 a qvel past
// 1e10 (mj_checkVel), 3 every qvel 1e6 (a qacc past 1e10: mj_checkAcc), 4 a NaN control at step 2
static void plant_bad(int B, int H, int n, int nu, double* init, double* ctrl) {
  for (int b = 0; b < B; b++) {
    double* x = init + (size_t)b * 2 * n;
    if (b % 5 == 1) x[0] = NAN;
    if (b % 5 == 2) x[n + n / 2] = 2e10;
    if (b % 5 == 3)
      for (int i = 0; i < n; i++) x[n + i] = 1e6;
    if (b % 5 == 4 && nu && H > 2) ctrl[((size_t)b * H + 2) * nu] = NAN;
  }
}

// B random starts and controls, H steps: chainfd_rollout on device (CHAINFD_CPU: the host)
// against mj_step, state by state
// A change to the model after loading in against_mujoco (NULL: none)
static void (*edit_model)(mjModel* m);

// MuJoCo's constraint solver run to convergence (its default tolerance stops short by about 1e-8
// of the solution, which chainfd's rollouts solve exactly)
static void tight_solver(mjModel* m) {
  m->opt.tolerance = 1e-14;
  m->opt.iterations = 1000;
  m->opt.ls_iterations = 100;
}

// Every ball's and free joint's spring turned away from the identity: its qpos_spring quaternion
// a rotation of 0.3 + 0.2 j about a unit axis that varies by joint (its position too for a free
// joint), so that the spring's reference orientation is not the joint's zero.
static void turn_ball_springs(mjModel* m) {
  for (int j = 0; j < m->njnt; j++) {
    int t = m->jnt_type[j], a = m->jnt_qposadr[j];
    if (t != mjJNT_BALL && t != mjJNT_FREE) continue;
    if (t == mjJNT_FREE) m->qpos_spring[a] += 0.1, m->qpos_spring[a + 2] -= 0.05, a += 3;
    double ax[3] = {1, 0.5 * j, -0.3}, len = sqrt(1 + 0.25 * j * j + 0.09), h = 0.5 * (0.3 + 0.2 * j);
    m->qpos_spring[a] = cos(h);
    for (int k = 0; k < 3; k++) m->qpos_spring[a + 1 + k] = sin(h) * ax[k] / len;
  }
}

static void against_mujoco_on(const char* spec, int integrator, int B, int H, double tol, int device) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  EXPECT(m != NULL, "%s: %s", spec, err);
  if (!m) return;
  if (edit_model) edit_model(m);
  m->opt.integrator = integrator;
  int n = m->nv, nu = m->nu;
  chainfd_rollout* r;
  EXPECT(chainfd_rollout_create(m, device, &r, err, sizeof err) == 0, "%s: %s", spec, err);
  tuned(r);
  mjData* d = mj_makeData(m);
  double* init = malloc(sizeof(double) * B * 2 * n);
  double* ctrl = malloc(sizeof(double) * (size_t)B * H * (nu ? nu : 1));
  double* out = malloc(sizeof(double) * (size_t)B * (H + 1) * 2 * n);
  double* mj = malloc(sizeof(double) * 2 * n);
  random_inputs(m, d, B, H, 5, init, ctrl);
  EXPECT(chainfd_rollout_run(r, B, H, init, 0, ctrl, out, 0, CHAINFD_HOST, err, sizeof err) == 0, "%s", err);
  double worst_pos = 0, worst_vel = 0;
  for (int b = 0; b < B; b++) {
    mj_resetData(m, d);
    chainfd_rollout_set_state(m, d, init + (size_t)b * 2 * n);
    for (int t = 0; t < H; t++) {
      memcpy(d->ctrl, ctrl + ((size_t)b * H + t) * nu, sizeof(double) * nu);
      mj_step(m, d);
      chainfd_rollout_get_state(m, d, mj);
      const double* x = out + ((size_t)b * (H + 1) + t + 1) * 2 * n;
      worst_pos = cfd_worst(worst_pos, max_abs_diff(x, mj, n));
      worst_vel = cfd_worst(worst_vel, max_abs_diff(x + n, mj + n, n));
    }
  }
  printf("%-60s %-12s %s B=%d H=%d max_abs_dqpos=%.2e max_abs_dqvel=%.2e\n", spec,
         integrator == mjINT_EULER ? "Euler" : "implicitfast", device == CHAINFD_CPU ? "CPU" : "GPU",
         B, H, worst_pos, worst_vel);
  EXPECT(worst_pos <= tol, "%s: qpos differs by %.3e", spec, worst_pos);
  // qvel: within 100x qpos's bound, as test_step_trajectories bounds it (rounding in qacc reaches
  // qvel as h qacc, qpos as h^2 qacc)
  EXPECT(worst_vel <= 100 * tol, "%s: qvel differs by %.3e", spec, worst_vel);
  release(r);
  free(init); free(ctrl); free(out); free(mj);
  mj_deleteData(d);
  mj_deleteModel(m);
}

static void against_mujoco(const char* spec, int integrator, int B, int H, double tol) {
  against_mujoco_on(spec, integrator, B, H, tol, CHAINFD_CPU);
}

// the GPU rollout against the CPU rollout, with shared and distinct starts, every step or final
// (plant: bad states and controls in some instances, plant_bad; the warnings compared too)
// edit: a change to the model after loading (NULL: none)
static void gpu_against_cpu_edit(const char* spec, int integrator, int B, int H, int device,
                                 int plant, void (*edit)(mjModel*)) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  EXPECT(m, "%s", err);
  if (!m) return;
  if (edit) edit(m);
  m->opt.integrator = integrator;
  if (plant == 2) m->opt.disableflags |= mjDSBL_AUTORESET;  // bad states go on bad
  int n = m->nv, nu = m->nu;
  chainfd_rollout *cpu, *gpu;
  EXPECT(chainfd_rollout_create(m, -1, &cpu, err, sizeof err) == 0, "%s", err);
  EXPECT(chainfd_rollout_create(m, device, &gpu, err, sizeof err) == 0, "%s", err);
  tuned(gpu);
  double* init = malloc(sizeof(double) * B * 2 * n);
  double* ctrl = malloc(sizeof(double) * (size_t)B * H * (nu ? nu : 1));
  size_t total = (size_t)B * (H + 1) * 2 * n;
  double* a = malloc(sizeof(double) * total);
  double* g = malloc(sizeof(double) * total);
  cfd_rng rng = {9};
  for (int k = 0; k < B * 2 * n; k++) init[k] = cfd_rng_uniform(&rng, -1, 1);
  for (size_t k = 0; k < (size_t)B * H * nu; k++) ctrl[k] = cfd_rng_uniform(&rng, -1, 1);
  if (plant) plant_bad(B, H, n, nu, init, ctrl);
  int* wc = malloc(sizeof(int) * B);
  int* wg = malloc(sizeof(int) * B);
  for (int shared = 0; shared < 2; shared++)
    for (int final_only = 0; final_only < 2; final_only++) {
      size_t count = (size_t)B * (final_only ? 1 : H + 1) * 2 * n;
      EXPECT(chainfd_rollout_run(cpu, B, H, init, shared, ctrl, a, final_only, CHAINFD_HOST, err, sizeof err) == 0, "%s", err);
      EXPECT(chainfd_rollout_run(gpu, B, H, init, shared, ctrl, g, final_only, CHAINFD_HOST, err, sizeof err) == 0, "%s", err);
      // state by state, relative to each entry's size (at least 1); a bad state left to run
      // (autoreset off): only whether it is bad
      double e = 0;
      for (size_t k = 0; k < count; k += 2 * n)
        e = cfd_worst(e, plant == 2 && any_bad(a + k, 2 * n)
                        ? (any_bad(g + k, 2 * n) ? 0 : INFINITY)
                        : rel_diff_nan(a + k, g + k, 2 * n));
      if (plant) {
        int same = !chainfd_rollout_instance_warnings(cpu, wc, err, sizeof err) &&
                   !chainfd_rollout_instance_warnings(gpu, wg, err, sizeof err);
        EXPECT(same, "%s", err);
        for (int b = 0; same && b < B; b++) same = wc[b] == wg[b];
        EXPECT(same && chainfd_rollout_warnings(cpu) == chainfd_rollout_warnings(gpu),
               "%s B=%d: GPU warnings (%ld) differ from the CPU's (%ld)", spec, B,
               chainfd_rollout_warnings(gpu), chainfd_rollout_warnings(cpu));
        EXPECT(shared || chainfd_rollout_warnings(gpu) > 0, "%s: planted bad states, no warning", spec);
      }
      printf("%-44s %s B=%-5d H=%-4d shared=%d final=%d gpu vs cpu max_rel_err=%.2e kernel=%.3f ms%s\n",
             spec, device == CHAINFD_ALL_GPUS ? "all GPUs" : "GPU 0", B, H, shared, final_only, e,
             chainfd_rollout_last_kernel_ms(gpu), plant ? " (bad states planted)" : "");
      EXPECT(e <= 1e-10, "%s B=%d: GPU rollout differs from the CPU rollout by %.3e", spec, B, e);
    }
  chainfd_rollout_free(cpu);
  release(gpu);
  free(init); free(ctrl); free(a); free(g); free(wc); free(wg);
  mj_deleteModel(m);
}

static void gpu_against_cpu_ex(const char* spec, int integrator, int B, int H, int device, int plant) {
  gpu_against_cpu_edit(spec, integrator, B, H, device, plant, NULL);
}

static void gpu_against_cpu(const char* spec, int integrator, int B, int H, int device) {
  gpu_against_cpu_ex(spec, integrator, B, H, device, 0);
}

// actuator 1 moved onto actuator 0's joint: two actuators on one dof
static void share_first_joint(mjModel* m) {
  if (m->nu > 1) m->actuator_trnid[2] = m->actuator_trnid[0];
}

static void quiet(const char* msg) { (void)msg; }  // MuJoCo's warnings here are expected

// mj_step's bad-state handling (rollout_step.h): the CPU rollout of planted bad states against
// mj_step, state by state, and its warnings against MuJoCo's count of them, step by step
static void bad_states_against_mujoco(const char* spec, int integrator, int autoreset) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  EXPECT(m != NULL, "%s: %s", spec, err);
  if (!m) return;
  m->opt.integrator = integrator;
  if (!autoreset) m->opt.disableflags |= mjDSBL_AUTORESET;
  int n = m->nv, nu = m->nu, B = 5, H = autoreset ? 30 : 8;
  chainfd_rollout* r;
  EXPECT(chainfd_rollout_create(m, CHAINFD_CPU, &r, err, sizeof err) == 0, "%s: %s", spec, err);
  mjData* d = mj_makeData(m);
  double* init = malloc(sizeof(double) * B * 2 * n);
  double* ctrl = malloc(sizeof(double) * (size_t)B * H * (nu ? nu : 1));
  double* out = malloc(sizeof(double) * (size_t)B * (H + 1) * 2 * n);
  double* mj = malloc(sizeof(double) * 2 * n);
  int counts[5];
  random_inputs(m, d, B, H, 21, init, ctrl);
  plant_bad(B, H, n, nu, init, ctrl);
  mju_user_warning = quiet;
  EXPECT(chainfd_rollout_run(r, B, H, init, 0, ctrl, out, 0, CHAINFD_HOST, err, sizeof err) == 0, "%s", err);
  EXPECT(chainfd_rollout_instance_warnings(r, counts, err, sizeof err) == 0, "%s", err);
  double worst = 0;
  long total = 0;
  const int kinds[4] = {mjWARN_BADQPOS, mjWARN_BADQVEL, mjWARN_BADQACC, mjWARN_BADCTRL};
  for (int b = 0; b < B; b++) {
    mj_resetData(m, d);
    chainfd_rollout_set_state(m, d, init + (size_t)b * 2 * n);
    int warned = 0, state_warned = 0;
    for (int t = 0; t < H; t++) {
      memcpy(d->ctrl, ctrl + ((size_t)b * H + t) * nu, sizeof(double) * nu);
      for (int k = 0; k < 4; k++) d->warning[kinds[k]].number = 0;
      mj_step(m, d);
      for (int k = 0; k < 4; k++) warned += d->warning[kinds[k]].number;
      for (int k = 0; k < 3; k++) state_warned += d->warning[kinds[k]].number;
      chainfd_rollout_get_state(m, d, mj);
      const double* x = out + ((size_t)b * (H + 1) + t + 1) * 2 * n;
      // a bad state left to run (no autoreset) soon has angles so large that their rounding
      // decides their sines: from then on only whether the state is bad can be compared
      if (!autoreset && state_warned)
        worst = cfd_worst(worst, any_bad(x, 2 * n) != any_bad(mj, 2 * n) ? INFINITY : 0);
      else
        worst = cfd_worst(worst, rel_diff_nan(x, mj, 2 * n));
    }
    EXPECT(counts[b] == warned, "%s instance %d: %d warnings, mj_step %d", spec, b, counts[b], warned);
    EXPECT((b == 0) == (warned == 0), "%s instance %d: planted %s, but %d warnings", spec, b,
           b ? "a bad state" : "nothing", warned);
    total += counts[b];
  }
  EXPECT(chainfd_rollout_warnings(r) == total, "%s: %ld warnings in all, per instance %ld", spec,
         chainfd_rollout_warnings(r), total);
  printf("%-60s %-12s autoreset=%d warnings %d %d %d %d %d max_rel_diff=%.2e\n", spec,
         integrator == mjINT_EULER ? "Euler" : "implicitfast", autoreset, counts[0], counts[1],
         counts[2], counts[3], counts[4], worst);
  EXPECT(worst <= 1e-9, "%s: the states differ from mj_step's by %.3e", spec, worst);
  mju_user_warning = NULL;
  chainfd_rollout_free(r);
  free(init); free(ctrl); free(out); free(mj);
  mj_deleteData(d);
  mj_deleteModel(m);
}

static void refused(const char* spec, int integrator, const char* word) {
  char err[1024] = "";
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  if (!m) { EXPECT(0, "%s: %s", spec, err); return; }
  if (integrator >= 0) m->opt.integrator = integrator;
  chainfd_rollout* r;
  EXPECT(chainfd_rollout_create(m, -1, &r, err, sizeof err) != 0, "%s must be refused", spec);
  EXPECT(strstr(err, word) != NULL, "%s: '%s' must mention '%s'", spec, err, word);
  printf("refused: %s\n", err);
  mj_deleteModel(m);
}

// Extended chains (chainfd_rollout_create_extended) against the chain MuJoCo compiles of the same
// links: a regular chain of 11 links extended to 41 against the regular chain of 41 (only the
// height of the pivot differs, which no joint-space quantity sees), and a chain whose links 1 .. 3
// differ in everything a link carries (axis, hinge or slide, offset, mass, inertia, damping,
// stiffness, spring reference, armature, joint zero) extended to 19 against the MJCF repeating
// them (pattern_chain). The rollout against mj_step on the long model, state by state, and the
// links' world poses against its xpos and xmat (less the pivots' height difference). Extended to
// its own length, a chain rolls out bit for bit as chainfd_rollout_create's.
static const char* ext_short = "chain:11,damping=0.1,armature=0.01,stiffness=0.5";
static const char* ext_long = "chain:41,damping=0.1,armature=0.01,stiffness=0.5";

// An MJCF chain of `links` links: link 0, then links 1, 2, 3 of a pattern repeated.
static mjModel* pattern_chain(int links) {
  static const struct {
    const char *type, *axis, *pos;
    double mass, ixx, iyy, izz, damping, stiffness, springref, armature, ref;
  } pat[3] = {{"hinge", "0 0 1", "0.2 0 0", 0.3, 2e-3, 3e-3, 4e-3, 0.05, 0.4, 0.2, 0.01, 0.1},
              {"slide", "0.6 0 0.8", "0.15 0.02 0", 0.2, 1e-3, 2e-3, 1.5e-3, 0.3, 5.0, -0.05, 0.02, 0.03},
              {"hinge", "0 1 0", "0.25 0 0.01", 0.45, 4e-3, 2e-3, 3e-3, 0.02, 0.0, 0.0, 0.005, -0.2}};
  size_t size = 4096 + 512 * (size_t)links, len = 0;
  char* xml = malloc(size);
  len += snprintf(xml + len, size - len, "<mujoco><option timestep=\"0.002\"/><worldbody>");
  for (int i = 0; i < links; i++) {
    if (i == 0) {
      len += snprintf(xml + len, size - len, "<body pos=\"0 0 1\"><joint axis=\"0 1 0\" damping=\"0.1\"/>"
                      "<inertial pos=\"0.1 0 0\" mass=\"0.5\" diaginertia=\"1e-3 4e-3 4e-3\"/>");
      continue;
    }
    int k = (i - 1) % 3;
    len += snprintf(xml + len, size - len,
                    "<body pos=\"%s\"><joint type=\"%s\" axis=\"%s\" damping=\"%g\" stiffness=\"%g\" "
                    "springref=\"%g\" armature=\"%g\" ref=\"%g\"/><inertial pos=\"0.05 0.01 0\" "
                    "mass=\"%g\" diaginertia=\"%g %g %g\"/>", pat[k].pos, pat[k].type, pat[k].axis,
                    pat[k].damping, pat[k].stiffness, pat[k].springref, pat[k].armature, pat[k].ref,
                    pat[k].mass, pat[k].ixx, pat[k].iyy, pat[k].izz);
  }
  for (int i = 0; i < links; i++) len += snprintf(xml + len, size - len, "</body>");
  snprintf(xml + len, size - len, "</worldbody></mujoco>");
  char err[1024];
  mjSpec* spec = mj_parseXMLString(xml, NULL, err, sizeof err);
  free(xml);
  EXPECT(spec != NULL, "pattern chain: %s", err);
  if (!spec) return NULL;
  mjModel* m = mj_compile(spec, NULL);
  EXPECT(m != NULL, "pattern chain: %s", mjs_getError(spec));
  mj_deleteSpec(spec);
  return m;
}

static void extended_against_mujoco(mjModel* ms, mjModel* ml, const char* what, double lift_want,
                                    int integrator) {
  char err[1024];
  EXPECT(ms && ml, "%s: models", what);
  if (!ms || !ml) return;
  ms->opt.integrator = ml->opt.integrator = integrator;
  int n = ml->nv, B = 3, H = 100;
  chainfd_rollout* r;
  EXPECT(chainfd_rollout_create_extended(ms, n, CHAINFD_CPU, &r, err, sizeof err) == 0, "%s", err);
  if (!r) return;
  EXPECT(chainfd_rollout_links(r) == n, "links %d", chainfd_rollout_links(r));
  int dofs_ok = chainfd_rollout_link_dof(r, n) == -1 && chainfd_rollout_link_dof(r, -1) == -1;
  for (int i = 0; i < n; i++)  // link 0, then the model's links 1 .. nv - 1 over and over
    dofs_ok &= chainfd_rollout_link_dof(r, i) == (i ? 1 + (i - 1) % (ms->nv - 1) : 0);
  EXPECT(dofs_ok, "%s: link_dof: which model dof each link repeats", what);
  mjData* d = mj_makeData(ml);
  double* init = malloc(sizeof(double) * B * 2 * n);
  double* out = malloc(sizeof(double) * (size_t)B * (H + 1) * 2 * n);
  double* mj = malloc(sizeof(double) * 2 * n);
  double *xpos = malloc(sizeof(double) * 12 * n), *xmat = xpos + 3 * n;
  random_inputs(ml, d, B, H, 31, init, NULL);
  EXPECT(chainfd_rollout_run(r, B, H, init, 0, NULL, out, 0, CHAINFD_HOST, err, sizeof err) == 0, "%s", err);
  cfd_chain c;
  EXPECT(cfd_chain_from_model(ml, &c, err, sizeof err) == 0, "%s", err);
  double worst_pos = 0, worst_vel = 0, worst_pose = 0;
  for (int b = 0; b < B; b++) {
    mj_resetData(ml, d);
    chainfd_rollout_set_state(ml, d, init + (size_t)b * 2 * n);
    for (int t = 0; t < H; t++) {
      mj_step(ml, d);
      chainfd_rollout_get_state(ml, d, mj);
      const double* x = out + ((size_t)b * (H + 1) + t + 1) * 2 * n;
      worst_pos = cfd_worst(worst_pos, max_abs_diff(x, mj, n));
      worst_vel = cfd_worst(worst_vel, max_abs_diff(x + n, mj + n, n));
      if (t % 25 == 24) {  // poses: MuJoCo's at the same qpos, the pivot's height apart
        mj_kinematics(ml, d);
        chainfd_rollout_link_poses(r, x, xpos, xmat);
        double lift = d->xpos[3 * c.body[0] + 2] - xpos[2];
        for (int i = 0; i < n; i++) {
          const double* mp = d->xpos + 3 * c.body[i];
          const double* mm = d->xmat + 9 * c.body[i];
          double e = cfd_worst(cfd_worst(fabs(xpos[3 * i] - mp[0]), fabs(xpos[3 * i + 1] - mp[1])),
                               fabs(xpos[3 * i + 2] + lift - mp[2]));
          worst_pose = cfd_worst(worst_pose, cfd_worst(e, max_abs_diff(xmat + 9 * i, mm, 9)));
        }
        EXPECT(fabs(lift - lift_want) <= 1e-12, "the pivots are %g m apart, not %g", lift, lift_want);
      }
    }
  }
  printf("%s, extended to %d links: %s max_abs_dqpos=%.2e max_abs_dqvel=%.2e poses=%.2e\n", what,
         n, integrator == mjINT_EULER ? "Euler" : "implicitfast", worst_pos, worst_vel, worst_pose);
  EXPECT(worst_pos <= 1e-9 && worst_vel <= 1e-7, "extended: qpos %.3e, qvel %.3e", worst_pos, worst_vel);
  EXPECT(worst_pose <= 1e-12, "extended: link poses %.3e", worst_pose);
  cfd_chain_free(&c);
  chainfd_rollout_free(r);
  free(init); free(out); free(mj); free(xpos);
  mj_deleteData(d);
}

static void extended_checks(void) {
  char err[1024];
  mjModel* m = cfd_load_model(ext_long, err, sizeof err);
  if (!m) return;
  int n = m->nv, H = 30;
  chainfd_rollout *plain, *same;
  EXPECT(chainfd_rollout_create(m, CHAINFD_CPU, &plain, err, sizeof err) == 0, "%s", err);
  EXPECT(chainfd_rollout_create_extended(m, n, CHAINFD_CPU, &same, err, sizeof err) == 0, "%s", err);
  double* x0 = calloc(2 * n, sizeof(double));
  for (int i = 0; i < n; i++) x0[i] = 0.1 * sin(i), x0[n + i] = 0.2 * cos(i);
  double *a = malloc(sizeof(double) * 2 * n * (H + 1)), *b = malloc(sizeof(double) * 2 * n * (H + 1));
  int st = chainfd_rollout_run(plain, 1, H, x0, 1, NULL, a, 0, CHAINFD_HOST, err, sizeof err) |
           chainfd_rollout_run(same, 1, H, x0, 1, NULL, b, 0, CHAINFD_HOST, err, sizeof err);
  EXPECT(st == 0 && !memcmp(a, b, sizeof(double) * 2 * n * (H + 1)),
         "extended to its own length: not the plain rollout's bits (%s)", err);
  chainfd_rollout_free(plain);
  chainfd_rollout_free(same);
  free(x0); free(a); free(b);
  mj_deleteModel(m);
  // refusals: too short, a model with actuators, a one-link model
  chainfd_rollout* r;
  m = cfd_load_model(ext_short, err, sizeof err);
  EXPECT(chainfd_rollout_create_extended(m, 1, CHAINFD_CPU, &r, err, sizeof err) != 0 && !r &&
         strstr(err, "2 to"), "1 link: %s", err);
  printf("refused: %s\n", err);
  mj_deleteModel(m);
  m = cfd_load_model("chain:6,actuators=1", err, sizeof err);
  EXPECT(chainfd_rollout_create_extended(m, 100, CHAINFD_CPU, &r, err, sizeof err) != 0 && !r &&
         strstr(err, "'a0'") && strstr(err, "no actuators"), "actuators: %s", err);
  printf("refused: %s\n", err);
  mj_deleteModel(m);
  m = cfd_load_model("chain:1", err, sizeof err);
  EXPECT(chainfd_rollout_create_extended(m, 100, CHAINFD_CPU, &r, err, sizeof err) != 0 && !r &&
         strstr(err, "two links"), "one link: %s", err);
  printf("refused: %s\n", err);
  mj_deleteModel(m);
  m = cfd_load_model(CHAINFD_TEST_MODELS "/multi_joint_root.xml", err, sizeof err);
  EXPECT(m && chainfd_rollout_create_extended(m, 100, CHAINFD_CPU, &r, err, sizeof err) != 0 &&
         !r && strstr(err, "'root'"), "a first body with two joints: %s", err);
  printf("refused: %s\n", err);
  if (m) mj_deleteModel(m);
}

// the GPU rollout of an extended chain against the CPU's: 3000 links (each step's dynamics by the
// scan kernel) and 20,000
static void extended_gpu_against_cpu(int links, int B, int H) {
  char err[1024];
  mjModel* m = cfd_load_model(ext_short, err, sizeof err);
  if (!m) return;
  chainfd_rollout *cpu, *gpu;
  EXPECT(chainfd_rollout_create_extended(m, links, CHAINFD_CPU, &cpu, err, sizeof err) == 0, "%s", err);
  EXPECT(chainfd_rollout_create_extended(m, links, 0, &gpu, err, sizeof err) == 0, "%s", err);
  tuned(gpu);
  size_t nx = 2 * (size_t)links;
  double* init = malloc(sizeof(double) * B * nx);
  double *a = malloc(sizeof(double) * B * nx), *g = malloc(sizeof(double) * B * nx);
  cfd_rng rng = {17};
  for (size_t k = 0; k < B * nx; k++) init[k] = cfd_rng_uniform(&rng, -0.3, 0.3);
  int st = chainfd_rollout_run(cpu, B, H, init, 0, NULL, a, 1, CHAINFD_HOST, err, sizeof err);
  EXPECT(st == 0, "%s", err);
  st = chainfd_rollout_run(gpu, B, H, init, 0, NULL, g, 1, CHAINFD_HOST, err, sizeof err);
  EXPECT(st == 0, "%s", err);
  double scale = 0;
  for (size_t k = 0; k < B * nx; k++) scale = fmax(scale, fabs(a[k]));
  double e = max_abs_diff(a, g, B * nx) / scale;
  printf("%s extended to %d links, B=%d H=%d: GPU against CPU %.2e (scan steps %ld)\n", ext_short,
         links, B, H, e, cfd_rollout_scan_steps(gpu));
  EXPECT(e <= 1e-10, "extended %d links: GPU against CPU %.3e", links, e);
  EXPECT(cfd_rollout_scan_steps(gpu) == H, "the scan kernel took %ld of %d steps",
         cfd_rollout_scan_steps(gpu), H);
  chainfd_rollout_free(cpu);
  release(gpu);
  free(init); free(a); free(g);
  mj_deleteModel(m);
}

// Rollouts in several threads at once, each its own rollout of one model (as CHAINFD_ALL_GPUS runs
// a share on each device's context in a thread of its own), against the same runs made one after
// another: bit for bit, and each context's counters its own (no state shared between contexts).
// device: CHAINFD_CPU or a CUDA device index. (The CPU build of this runs under ASan in CI.)
#define PARALLEL_THREADS 4
typedef struct {
  chainfd_rollout* r;
  int B, H;
  const double *init, *ctrl;
  double* out;
  int status;
  char err[256];
} parallel_job;

static void* parallel_run(void* arg) {
  parallel_job* j = arg;
  for (int rep = 0; rep < 3 && !j->status; rep++)
    j->status = chainfd_rollout_run(j->r, j->B, j->H, j->init, 0, j->ctrl, j->out, 0, CHAINFD_HOST,
                                    j->err, sizeof j->err);
  return NULL;
}

static void threads_against_serial(const char* spec, int device, int B, int H) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  EXPECT(m != NULL, "%s: %s", spec, err);
  if (!m) return;
  int n = m->nv, nu = m->nu;
  size_t nin = (size_t)B * 2 * n, nctrl = (size_t)B * H * (nu ? nu : 1);
  size_t nout = (size_t)B * (H + 1) * 2 * n;
  parallel_job jobs[PARALLEL_THREADS];
  double* serial = malloc(sizeof(double) * nout * PARALLEL_THREADS);
  double* data = malloc(sizeof(double) * (nin + nctrl + nout) * PARALLEL_THREADS);
  cfd_rng rng = {23};
  for (int k = 0; k < PARALLEL_THREADS; k++) {
    parallel_job* j = &jobs[k];
    double* init = data + (nin + nctrl + nout) * k;
    double* ctrl = init + nin;
    for (size_t i = 0; i < nin; i++) init[i] = cfd_rng_uniform(&rng, -1, 1);
    for (size_t i = 0; i < nctrl; i++) ctrl[i] = cfd_rng_uniform(&rng, -1, 1);
    *j = (parallel_job){NULL, B, H, init, ctrl, ctrl + nctrl, 0, ""};
    EXPECT(chainfd_rollout_create(m, device, &j->r, err, sizeof err) == 0, "%s", err);
    if (j->r) tuned(j->r);
    // the serial run, on the same rollout
    if (j->r)
      EXPECT(chainfd_rollout_run(j->r, B, H, init, 0, ctrl, serial + nout * k, 0, CHAINFD_HOST, err,
                                 sizeof err) == 0, "%s", err);
  }
  long scan_before[PARALLEL_THREADS];
  pthread_t th[PARALLEL_THREADS];
  for (int k = 0; k < PARALLEL_THREADS; k++) {
    scan_before[k] = jobs[k].r ? cfd_rollout_scan_steps(jobs[k].r) : 0;
    if (jobs[k].r) EXPECT(pthread_create(&th[k], NULL, parallel_run, &jobs[k]) == 0, "pthread_create");
  }
  double worst = 0;
  for (int k = 0; k < PARALLEL_THREADS; k++) {
    if (!jobs[k].r) continue;
    pthread_join(th[k], NULL);
    EXPECT(jobs[k].status == 0, "thread %d: %s", k, jobs[k].err);
    double e = 0;  // bit for bit: the same kernels on the same inputs
    for (size_t i = 0; i < nout; i++)
      if (memcmp(&jobs[k].out[i], &serial[nout * k + i], sizeof(double))) e = fmax(e, 1);
    worst = fmax(worst, e);
    // each context counts its own steps: 3 runs of H by the scan kernel, or none
    long took = cfd_rollout_scan_steps(jobs[k].r) - scan_before[k];
    EXPECT(took == 0 || took == 3L * H, "thread %d: its context counted %ld scan steps (3 x %d "
           "or none)", k, took, H);
    release(jobs[k].r);
  }
  printf("%-44s %s %d threads B=%d H=%d: %s\n", spec, device == CHAINFD_CPU ? "CPU" : "GPU 0",
         PARALLEL_THREADS, B, H, worst ? "DIFFER from the serial runs" : "bit for bit the serial runs");
  EXPECT(worst == 0, "%s: parallel rollouts differ from the serial ones", spec);
  free(serial);
  free(data);
  mj_deleteModel(m);
}

// limits (0.3 rad, 0.3 m) and friction loss on a random chain with slides and actuators
static const char* limits20 =
    "chain:20,random=1,seed=4,slide=0.2,damping=0.3,armature=0.05,stiffness=1,actuators=1,"
    "limit=0.3,frictionloss=0.05";

int main(int argc, char** argv) {
  if (argc > 1 && !strcmp(argv[1], "--gpu")) {
    if (cfd_gpu_device_count() == 0) {
      printf("SKIPPED: no CUDA device\n");
      return 77;
    }
    gpu_against_cpu(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_EULER, 1, 50, 0);
    gpu_against_cpu(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_IMPLICITFAST, 7, 50, 0);
    gpu_against_cpu(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_EULER, 1000, 64, 0);
    // 50 links: a warp per instance in blocks of 32 links (world coordinates, the default), 8
    // lanes in link frames with the state in global memory (B = 300 leaves idle groups), a thread
    // per instance; 100 links with slides in blocks (four, the last one partial)
    for (int variant = 2; variant >= 0; variant--) {
      tuning = (cfd_gpu_tuning){.rollout_thread = variant == 0, .rollout_link_frames = variant == 1};
      gpu_against_cpu("chain:50,random=1,seed=3,damping=0.1,armature=0.01,stiffness=0.5,actuators=1",
                      mjINT_IMPLICITFAST, 300, 32, 0);
    }
    tuning = (cfd_gpu_tuning){0};
    gpu_against_cpu("chain:100,random=1,seed=8,slide=0.2,damping=0.1,armature=0.02,actuators=1",
                    mjINT_EULER, 7, 20, 0);
    // up to 16 links: a group of lanes per instance (B = 37 leaves idle groups in the last
    // block), exchanging through shared memory and by shuffles, then the same batch with one
    // thread per instance
    const char* small = "chain:12,random=1,seed=5,damping=0.2,armature=0.02,stiffness=0.5,actuators=1";
    // (3: lanes in world coordinates, the default; 2, 1: in link frames; 0: a thread per instance)
    for (int variant = 3; variant >= 0; variant--) {
      tuning = (cfd_gpu_tuning){.rollout_thread = variant == 0, .rollout_link_frames = variant < 3,
                                .lanes_shuffle = variant == 1};
      gpu_against_cpu(small, mjINT_IMPLICITFAST, 37, 40, 0);
      gpu_against_cpu(small, mjINT_EULER, 5, 40, 0);
    }
    tuning = (cfd_gpu_tuning){0};
    // the world lanes' group widths: 4 (2 links), 8 (arm7, above), 16 (above), 32 (20 links with
    // slides, and 32: every lane a link); a batch of 20000
    gpu_against_cpu(CHAINFD_SCENES_DIR "/double_pendulum.xml", mjINT_EULER, 9, 50, 0);
    gpu_against_cpu("chain:20,random=1,seed=6,slide=0.3,damping=0.2,armature=0.02,stiffness=0.5,actuators=1",
                    mjINT_IMPLICITFAST, 13, 40, 0);
    gpu_against_cpu("chain:32,random=1,seed=7,damping=0.1,armature=0.02,actuators=1", mjINT_EULER,
                    6, 40, 0);
    gpu_against_cpu(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_IMPLICITFAST, 20000, 8, 0);
    // two actuators on one joint: the dof's lane sums them in the CPU's order
    gpu_against_cpu(CHAINFD_TEST_MODELS "/shared_joint_actuators.xml", mjINT_IMPLICITFAST,
                    21, 60, 0);
    gpu_against_cpu(CHAINFD_TEST_MODELS "/clamped_affine.xml", mjINT_IMPLICITFAST, 19, 60, 0);
    // the batch split across every visible device (one here, or several on a multi-GPU host)
    printf("CUDA devices: %d\n", cfd_gpu_device_count());
    gpu_against_cpu(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_EULER, 1001, 64, CHAINFD_ALL_GPUS);
    // bad states and controls (mj_step's resets) in every kernel: world lanes (arm7, 12 links),
    // world blocks (50 links), link-frame lanes in shared and in global memory, a thread per
    // instance (local and global state), all GPUs; then with autoreset off
    gpu_against_cpu_ex(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_EULER, 37, 30, 0, 1);
    gpu_against_cpu_ex(small, mjINT_IMPLICITFAST, 23, 30, 0, 1);
    const char* long50 = "chain:50,random=1,seed=3,damping=0.1,armature=0.01,stiffness=0.5,actuators=1";
    for (int variant = 2; variant >= 0; variant--) {
      tuning = (cfd_gpu_tuning){.rollout_thread = variant == 0, .rollout_link_frames = variant == 1};
      gpu_against_cpu_ex(small, mjINT_EULER, 23, 30, 0, 1);
      gpu_against_cpu_ex(long50, mjINT_IMPLICITFAST, 21, 12, 0, 1);
    }
    tuning = (cfd_gpu_tuning){0};
    gpu_against_cpu_ex(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_EULER, 1001, 20, CHAINFD_ALL_GPUS, 1);
    gpu_against_cpu_ex(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_EULER, 37, 8, 0, 2);
    gpu_against_cpu_ex(long50, mjINT_EULER, 21, 8, 0, 2);
    // groups of 4 (a bad control's bad implicitfast derivative, both autoreset settings) and 32;
    // the thread per instance with autoreset off
    for (int plant = 1; plant <= 2; plant++)
      gpu_against_cpu_ex(CHAINFD_TEST_MODELS "/clamped_affine.xml", mjINT_IMPLICITFAST, 19, 20, 0, plant);
    gpu_against_cpu_ex("chain:32,random=1,seed=7,damping=0.1,armature=0.02,actuators=1", mjINT_EULER,
                       11, 20, 0, 1);
    tuning = (cfd_gpu_tuning){.rollout_thread = 1};
    gpu_against_cpu_ex(small, mjINT_IMPLICITFAST, 23, 8, 0, 2);
    gpu_against_cpu_ex(long50, mjINT_EULER, 21, 8, 0, 2);
    tuning = (cfd_gpu_tuning){0};
    // the lanes' rollout of the arm against mj_step itself
    against_mujoco_on(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_IMPLICITFAST, 4, 100, 1e-9, 0);
    // chains past 256 links in batches up to 1024: each step's dynamics by the scan kernel (two
    // launches a step); bad states with and without autoreset; two actuators on one joint; then
    // the lanes on the same chain, and a batch past 1024, which the lanes take
    const char* long300 = "chain:300,random=1,seed=11,damping=0.1,armature=0.01,stiffness=0.5,actuators=1";
    const char* long1000 = "chain:1000,random=1,seed=12,damping=0.05,armature=0.01,actuators=1";
    long before = scan_steps;
    gpu_against_cpu(long300, mjINT_IMPLICITFAST, 1, 20, 0);
    gpu_against_cpu(long300, mjINT_EULER, 9, 12, 0);
    gpu_against_cpu(long1000, mjINT_EULER, 2, 8, 0);
    gpu_against_cpu_ex(long300, mjINT_IMPLICITFAST, 7, 12, 0, 1);
    gpu_against_cpu_ex(long300, mjINT_EULER, 7, 8, 0, 2);
    gpu_against_cpu_edit(long300, mjINT_IMPLICITFAST, 3, 12, 0, 0, share_first_joint);
    gpu_against_cpu(long300, mjINT_IMPLICITFAST, 300, 4, 0);  // (longer blocks from B = 32)
    EXPECT(scan_steps - before == 4 * (20 + 12 + 8 + 12 + 8 + 12 + 4),
           "the long chains' rollouts took %ld steps by the scan kernel", scan_steps - before);
    before = scan_steps;
    tuning = (cfd_gpu_tuning){.rollout_no_scan = 1};
    gpu_against_cpu(long300, mjINT_EULER, 9, 12, 0);
    tuning = (cfd_gpu_tuning){0};
    gpu_against_cpu(long300, mjINT_EULER, 1025, 2, 0);
    EXPECT(scan_steps == before, "the lanes' rollouts took the scan kernel");
    // the scan kernel's rollouts against mj_step itself (figures for the CPU rollout on these
    // chains: docs/RESULTS.md)
    against_mujoco_on(long300, mjINT_IMPLICITFAST, 2, 20, 1e-9, 0);
    against_mujoco_on(long1000, mjINT_EULER, 1, 8, 1e-9, 0);
    EXPECT(scan_steps - before == 20 + 8, "the rollouts against mj_step took "
           "%ld steps by the scan kernel", scan_steps - before);
    extended_gpu_against_cpu(3000, 2, 10);
    extended_gpu_against_cpu(20000, 1, 4);
    // contexts in several threads at once: short chains (lanes) and a long one (the scan kernel)
    threads_against_serial(CHAINFD_SCENES_DIR "/arm7.xml", 0, 64, 32);
    threads_against_serial(long300, 0, 3, 8);
    // trees of hinges and slides: the thread kernel through aba_tree.h
    gpu_against_cpu("chain:16,random=1,seed=21,branch=0.3,slide=0.2,damping=0.2,armature=0.02,"
                    "stiffness=0.5,actuators=1", mjINT_IMPLICITFAST, 1000, 32, 0);
    gpu_against_cpu("chain:300,random=1,seed=23,branch=0.2,damping=0.1,armature=0.01,actuators=1",
                    mjINT_EULER, 7, 16, 0);
    gpu_against_cpu("chain:16,random=1,seed=24,branch=0.3,ball=0.3,free=1,damping=0.1,armature=0.02",
                    mjINT_IMPLICITFAST, 1000, 32, 0);
    gpu_against_cpu("chain:12,random=1,seed=25,branch=0.3,ball=0.4,free=1,stiffness=1,damping=0.1,"
                    "armature=0.02", mjINT_EULER, 1000, 32, 0);
    // joint limits and friction loss: the thread kernel (rollout_step.h's rows); bad states too
    gpu_against_cpu(CHAINFD_TESTS_DIR "/constraints/arm_limits_friction.xml", mjINT_EULER, 1000, 64, 0);
    gpu_against_cpu(CHAINFD_TESTS_DIR "/constraints/arm_limits_friction.xml", mjINT_IMPLICITFAST, 37, 64, 0);
    gpu_against_cpu(limits20, mjINT_IMPLICITFAST, 300, 40, 0);
    gpu_against_cpu_ex(limits20, mjINT_EULER, 23, 30, 0, 1);
    gpu_against_cpu("chain:16,random=1,seed=21,branch=0.3,slide=0.2,damping=0.2,armature=0.02,"
                    "limit=0.2,frictionloss=0.05,actuators=1", mjINT_EULER, 100, 32, 0);
    // joint equalities (Woodbury over the ABA): the global thread kernel (a tree) and the local
    // one (a chain)
    gpu_against_cpu(CHAINFD_TESTS_DIR "/constraints/arm_gripper_equality.xml", mjINT_IMPLICITFAST, 1000, 64, 0);
    gpu_against_cpu_ex(CHAINFD_TESTS_DIR "/constraints/arm_gripper_equality.xml", mjINT_EULER, 23, 30, 0, 1);
    gpu_against_cpu(CHAINFD_TESTS_DIR "/constraints/arm_equality_serial.xml", mjINT_IMPLICITFAST, 1000, 64, 0);
    edit_model = tight_solver;
    against_mujoco_on(CHAINFD_TESTS_DIR "/constraints/arm_limits_friction.xml", mjINT_EULER, 4, 100,
                      1e-8, 0);
    edit_model = NULL;
    TEST_EXIT();
  }
  // a long chain: rounding grows with its length, within 1e-9 (figures: docs/RESULTS.md)
  against_mujoco("chain:300,random=1,seed=11,damping=0.1,armature=0.01,stiffness=0.5,actuators=1",
                 mjINT_IMPLICITFAST, 2, 20, 1e-9);
  against_mujoco(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_EULER, 4, 100, 1e-9);
  against_mujoco(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_IMPLICITFAST, 4, 100, 1e-9);
  against_mujoco(CHAINFD_TEST_MODELS "/shared_joint_actuators.xml", mjINT_IMPLICITFAST, 3, 100, 1e-9);
  // controls past their ranges on velocity-dependent gains: implicitfast's derivative takes them
  // clamped, as MuJoCo 4's does
  against_mujoco(CHAINFD_TEST_MODELS "/clamped_affine.xml", mjINT_IMPLICITFAST, 3, 100, 1e-9);
  against_mujoco(CHAINFD_TEST_MODELS "/clamped_affine.xml", mjINT_EULER, 3, 100, 1e-9);
  against_mujoco(CHAINFD_SCENES_DIR "/double_pendulum.xml", mjINT_EULER, 3, 200, 1e-9);
  against_mujoco("chain:20,random=1,seed=4,damping=0.3,armature=0.05,stiffness=1,actuators=1",
                 mjINT_EULER, 3, 100, 1e-9);
  against_mujoco("chain:20,random=1,seed=4,damping=0.3,armature=0.05,stiffness=1,actuators=1",
                 mjINT_IMPLICITFAST, 3, 100, 1e-9);
  // bad states and controls: mj_step's warnings and resets (and none with autoreset off)
  bad_states_against_mujoco(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_EULER, 1);
  bad_states_against_mujoco(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_IMPLICITFAST, 1);
  bad_states_against_mujoco(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_EULER, 0);
  bad_states_against_mujoco("chain:20,random=1,seed=4,damping=0.3,armature=0.05,stiffness=1,actuators=1",
                            mjINT_IMPLICITFAST, 1);
  // a NaN control on a velocity-dependent gain under implicitfast: no mj_checkAcc warning, a NaN
  // step, mj_checkPos's reset the step after
  bad_states_against_mujoco(CHAINFD_TEST_MODELS "/clamped_affine.xml", mjINT_IMPLICITFAST, 1);
  bad_states_against_mujoco(CHAINFD_TEST_MODELS "/clamped_affine.xml", mjINT_IMPLICITFAST, 0);
  refused("chain:12,random=1,seed=5,actuators=2", -1, "activation");
  refused(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_RK4, "integrator");
  // ball and free joints (their rotation vectors stepped as MuJoCo steps the quaternion), damped,
  // and sprung (about a turned reference orientation); their actuators refused
  against_mujoco(CHAINFD_TEST_MODELS "/ball.xml", mjINT_EULER, 3, 100, 1e-9);
  against_mujoco("chain:10,ball=1,damping=0.1,armature=0.01", mjINT_EULER, 3, 100, 1e-9);
  against_mujoco("chain:10,ball=1,damping=0.1,armature=0.01", mjINT_IMPLICITFAST, 3, 100, 1e-9);
  against_mujoco("chain:16,random=1,seed=24,branch=0.3,ball=0.3,free=1,damping=0.1,armature=0.02",
                 mjINT_EULER, 3, 100, 1e-9);
  against_mujoco("chain:16,random=1,seed=24,branch=0.3,ball=0.3,free=1,damping=0.1,armature=0.02",
                 mjINT_IMPLICITFAST, 3, 100, 1e-9);
  edit_model = turn_ball_springs;
  against_mujoco("chain:6,ball=1,stiffness=2,damping=0.05,armature=0.01", mjINT_EULER, 3, 100, 1e-9);
  against_mujoco("chain:6,ball=1,stiffness=2,damping=0.05,armature=0.01", mjINT_IMPLICITFAST, 3,
                 100, 1e-9);
  against_mujoco("chain:12,random=1,seed=25,branch=0.3,ball=0.4,free=1,stiffness=1,damping=0.1,"
                 "armature=0.02", mjINT_EULER, 3, 100, 1e-9);
  edit_model = NULL;
  refused("chain:4,ball=1,actuators=1", -1, "acts on ball joint");
  // joint limits and friction loss (rows solved inside the step, rollout_step.h), against MuJoCo's
  // solver run to convergence; equalities and contacts refused
  edit_model = tight_solver;
  against_mujoco(CHAINFD_TESTS_DIR "/constraints/arm_limits_friction.xml", mjINT_EULER, 4, 100, 1e-8);
  against_mujoco(CHAINFD_TESTS_DIR "/constraints/arm_limits_friction.xml", mjINT_IMPLICITFAST, 4, 100, 1e-8);
  against_mujoco(limits20, mjINT_EULER, 3, 100, 1e-8);
  against_mujoco(limits20, mjINT_IMPLICITFAST, 3, 100, 1e-8);
  against_mujoco("chain:16,random=1,seed=21,branch=0.3,slide=0.2,damping=0.2,armature=0.02,"
                 "limit=0.2,frictionloss=0.05,actuators=1", mjINT_EULER, 3, 100, 1e-8);
  // joint equalities: a gripper's mimic and a cubic coupling (Woodbury over the ABA), a joint
  // held alone (on the diagonal), with limits and friction loss
  against_mujoco(CHAINFD_TESTS_DIR "/constraints/arm_gripper_equality.xml", mjINT_EULER, 4, 100, 1e-8);
  against_mujoco(CHAINFD_TESTS_DIR "/constraints/arm_gripper_equality.xml", mjINT_IMPLICITFAST, 4, 100, 1e-8);
  against_mujoco(CHAINFD_TESTS_DIR "/constraints/arm_equality_serial.xml", mjINT_EULER, 4, 100, 1e-8);
  edit_model = NULL;
  refused(CHAINFD_TESTS_DIR "/constraints/loop_connect_weld.xml", -1, "connect: rollouts take joint equalities");
  refused("chain:10,free=1,floor=0.02", -1, "bodies 'world' and 'link0' can touch");
  refused(CHAINFD_TEST_MODELS "/free.xml", mjINT_IMPLICITFAST, "alone in its tree");
  against_mujoco(CHAINFD_TEST_MODELS "/free.xml", mjINT_EULER, 3, 100, 1e-9);
  // trees of hinges and slides (an arm with a branch, a tree with side branches, two chains from
  // the world): the tree sweeps (aba_tree.h), against mj_step
  against_mujoco("chain:16,random=1,seed=21,branch=0.3,slide=0.2,damping=0.2,armature=0.02,"
                 "stiffness=0.5,actuators=1", mjINT_EULER, 3, 100, 1e-9);
  against_mujoco("chain:16,random=1,seed=21,branch=0.3,slide=0.2,damping=0.2,armature=0.02,"
                 "stiffness=0.5,actuators=1", mjINT_IMPLICITFAST, 3, 100, 1e-9);
  against_mujoco("chain:60,random=1,seed=22,branch=0.1,damping=0.1,armature=0.01,actuators=1",
                 mjINT_IMPLICITFAST, 2, 50, 1e-9);
  against_mujoco(CHAINFD_TEST_MODELS "/two_chains.xml", mjINT_EULER, 2, 100, 1e-9);
  against_mujoco("chain:16,random=1,seed=21,branch=0.3,slide=0.2,free=1,damping=0.2,armature=0.02,"
                 "actuators=1", mjINT_IMPLICITFAST, 3, 100, 1e-9);
  {
    char err[1024];
    mjModel* ms = cfd_load_model(ext_short, err, sizeof err);
    mjModel* ml = cfd_load_model(ext_long, err, sizeof err);
    mjModel* ps = pattern_chain(4);
    mjModel* pl = pattern_chain(19);
    for (int k = 0; k < 2; k++) {
      int integrator = k ? mjINT_IMPLICITFAST : mjINT_EULER;
      extended_against_mujoco(ms, ml, "chain:11 (regular) against chain:41", 3.0, integrator);
      extended_against_mujoco(ps, pl, "a 4-link pattern chain against the 19-link one", 0.0, integrator);
    }
    mj_deleteModel(ms); mj_deleteModel(ml); mj_deleteModel(ps); mj_deleteModel(pl);
  }
  extended_checks();
  threads_against_serial(CHAINFD_SCENES_DIR "/arm7.xml", CHAINFD_CPU, 16, 20);
  TEST_EXIT();
}
