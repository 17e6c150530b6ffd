// chainfd_deriv (include/chainfd_deriv.h): what the API does around the numbers that
// `chainfd check --derivatives` checks: qacc against mj_forward, the transition against a
// forward step of chainfd's own derivatives' definition (A x + B u to first order against
// mj_step, RK4's included), an active joint limit, a bad state, a model other than the one
// created for.
#include <stdlib.h>
#include <string.h>

#include <mujoco/mujoco.h>

#include "chain_gen.h"
#include "chainfd_deriv.h"
#include "gpu.h"
#include "test_util.h"

// qacc against mj_forward; one mj_step from x + dx, u + du against x' + A dx + B du (second order
// in the perturbation: perturbations of 1e-6 leave about 1e-6 of the change; bound 1e-3 of it);
// the controls scaled by ctrl_scale (0: at zero control)
static void against_mujoco_at(const char* spec, int integrator, double ctrl_scale) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  EXPECT(m != NULL, "%s: %s", spec, err);
  if (!m) return;
  m->opt.integrator = integrator;
  int nv = m->nv, nu = m->nu, nx = 2 * nv;
  chainfd_deriv* dv;
  EXPECT(chainfd_deriv_create(m, CHAINFD_CPU, &dv, err, sizeof err) == 0, "%s", err);
  mjData* d = mj_makeData(m);
  mjData* e = mj_makeData(m);
  for (int i = 0; i < nv; i++) d->qpos[i] = 0.3 * sin(1.7 * i + 0.4), d->qvel[i] = 0.5 * cos(2.3 * i);
  for (int a = 0; a < nu; a++) d->ctrl[a] = ctrl_scale * 0.2 * sin(a + 1.0);
  double* qacc = malloc(sizeof(double) * nv);
  double* A = malloc(sizeof(double) * nx * nx);
  double* B = malloc(sizeof(double) * nx * (nu ? nu : 1));
  mj_forward(m, d);
  EXPECT(chainfd_deriv_qacc(dv, m, d, qacc, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
  double scale = 0;
  for (int i = 0; i < nv; i++) scale = fmax(scale, fabs(d->qacc[i]));
  double eq = max_abs_diff(qacc, d->qacc, nv) / fmax(1, scale);
  EXPECT(eq < 1e-10, "%s: qacc differs from mj_forward's by %.3e", spec, eq);
  EXPECT(chainfd_transition_derivatives(dv, m, d, A, B, err, sizeof err) == 0, "%s", err);
  // x' at x and at x + dx, u + du
  double* dx = malloc(sizeof(double) * (nx + nu));
  for (int k = 0; k < nx + nu; k++) dx[k] = 1e-6 * sin(3.1 * k + 0.2);
  mj_copyData(e, m, d);
  mj_step(m, e);
  double* x1 = malloc(sizeof(double) * nx);
  for (int i = 0; i < nv; i++) x1[i] = e->qpos[i], x1[nv + i] = e->qvel[i];
  mj_copyData(e, m, d);
  for (int i = 0; i < nv; i++) e->qpos[i] += dx[i], e->qvel[i] += dx[nv + i];
  for (int a = 0; a < nu; a++) e->ctrl[a] += dx[nx + a];
  mj_step(m, e);
  double worst = 0, size = 0;
  for (int r = 0; r < nx; r++) {
    double pred = 0;
    for (int k = 0; k < nx; k++) pred += A[nx * r + k] * dx[k];
    for (int a = 0; a < nu; a++) pred += B[nu * r + a] * dx[nx + a];
    double got = (r < nv ? e->qpos[r] : e->qvel[r - nv]) - x1[r];
    worst = fmax(worst, fabs(got - pred));
    size = fmax(size, fabs(got));
  }
  printf("%-60s %-12s qacc %.2e, first-order step prediction %.2e of %.2e\n", spec,
         integrator == mjINT_EULER ? "Euler" : integrator == mjINT_RK4 ? "RK4" : "implicitfast", eq,
         worst, size);
  EXPECT(worst < 1e-3 * size, "%s: A dx + B du misses the step by %.3e of %.3e", spec, worst, size);
  free(qacc); free(A); free(B); free(dx); free(x1);
  mj_deleteData(d);
  mj_deleteData(e);
  chainfd_deriv_free(dv);
  mj_deleteModel(m);
}

static void against_mujoco(const char* spec, int integrator) { against_mujoco_at(spec, integrator, 1); }

static void errors(void) {
  char err[1024];
  mjModel* m = cfd_load_model("chain:5,limit=0.2,damping=0.1,armature=0.01,actuators=1", err, sizeof err);
  EXPECT(m != NULL, "%s", err);
  if (!m) return;
  chainfd_deriv* dv;
  EXPECT(chainfd_deriv_create(m, CHAINFD_CPU, &dv, err, sizeof err) == 0, "limits are taken: %s", err);
  mjData* d = mj_makeData(m);
  double D[25];
  EXPECT(chainfd_deriv_qacc(dv, m, d, NULL, D, NULL, NULL, err, sizeof err) == 0, "%s", err);
  d->qpos[2] = 0.5;  // past the limit: an active row, taken on the CPU
  double qacc[5];
  EXPECT(chainfd_deriv_qacc(dv, m, d, qacc, D, NULL, NULL, err, sizeof err) == 0, "an active limit: '%s'", err);
  mj_forward(m, d);
  double e = 0;
  for (int i = 0; i < 5; i++) e = fmax(e, fabs(qacc[i] - d->qacc[i]));
  EXPECT(e < 1e-6 * fmax(1, fabs(d->qacc[2])), "the constrained qacc at a limit: %.3e off MuJoCo's", e);
  printf("active limit: qacc %.2e from MuJoCo's\n", e);
  d->qpos[2] = 0;
  d->qvel[1] = NAN;
  EXPECT(chainfd_deriv_qacc(dv, m, d, NULL, D, NULL, NULL, err, sizeof err) == 1 &&
         strstr(err, "qvel[1] is not finite"), "a NaN state: '%s'", err);
  d->qvel[1] = 0;
  mjModel* other = cfd_load_model("chain:6", err, sizeof err);
  mjData* od = mj_makeData(other);
  EXPECT(chainfd_deriv_qacc(dv, other, od, NULL, D, NULL, NULL, err, sizeof err) == 1 &&
         strstr(err, "created for"), "another model: '%s'", err);
  mj_deleteData(od);
  mj_deleteModel(other);
  chainfd_deriv_free(dv);

  // constraint rows the GPU does not take, refused on a device before any is touched (so here too)
  mjModel* fr = cfd_load_model(CHAINFD_TEST_MODELS "/../constraints/arm_limits_friction.xml", err, sizeof err);
  EXPECT(fr != NULL, "%s", err);
  if (fr) {
    EXPECT(chainfd_deriv_create(fr, 0, &dv, err, sizeof err) == 1 &&
           strstr(err, "has friction loss (constraint rows: the GPU's derivatives"),
           "friction loss on the GPU: '%s'", err);
    printf("friction loss on the GPU: %s\n", err);
    mj_deleteModel(fr);
  }

  // ball and free joints: the CPU takes them with Euler and implicitfast; RK4 and the GPU refuse
  // them, naming the joint
  mjModel* ball = cfd_load_model(CHAINFD_TEST_MODELS "/ball.xml", err, sizeof err);
  EXPECT(ball != NULL, "%s", err);
  if (ball) {
    EXPECT(chainfd_deriv_create(ball, 0, &dv, err, sizeof err) == 1 &&
           strstr(err, "is a ball joint: the GPU's derivatives take hinges and slides"),
           "a ball on the GPU: '%s'", err);
    ball->opt.integrator = mjINT_RK4;
    EXPECT(chainfd_deriv_create(ball, CHAINFD_CPU, &dv, err, sizeof err) == 1 &&
           strstr(err, "is a ball joint: RK4's stages with quaternions"), "a ball with RK4: '%s'", err);
    printf("ball with RK4: %s\n", err);
    mj_deleteModel(ball);
  }

  mj_deleteData(d);
  mj_deleteModel(m);
}

// the batch (CPU loop; GPU kernel on `device`) against one call per state, bit for bit on the
// CPU, within 2e-11 of each block's largest entry on the GPU (its code contracts products and sums
// into FMAs, the CPU build's does not: rounding, raised by M's conditioning on the 32-dof chain to
// about 5e-12)
static void batch_within(const char* spec, int device, int B, double bound) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  EXPECT(m != NULL, "%s: %s", spec, err);
  if (!m) return;
  int nv = m->nv, nu = m->nu;
  chainfd_deriv *one, *dv;
  EXPECT(chainfd_deriv_create(m, CHAINFD_CPU, &one, err, sizeof err) == 0, "%s", err);
  EXPECT(chainfd_deriv_create(m, device, &dv, err, sizeof err) == 0, "%s", err);
  mjData* d = mj_makeData(m);
  size_t nn = (size_t)nv * nv, nnu = (size_t)nv * (nu ? nu : 1);
  double* x = malloc(sizeof(double) * B * 2 * nv);
  double* u = malloc(sizeof(double) * B * (nu ? nu : 1));
  double* got = malloc(sizeof(double) * B * (2 * nn + nnu));
  double* want = malloc(sizeof(double) * (2 * nn + nnu));
  for (int k = 0; k < B * 2 * nv; k++) x[k] = 0.4 * sin(0.37 * k + 0.1);
  for (int k = 0; k < B * nu; k++) u[k] = 0.5 * cos(0.91 * k);
  double *gq = got, *gv = got + B * nn, *gu = got + 2 * B * nn;
  EXPECT(chainfd_deriv_batch(dv, B, x, u, gq, gv, nu ? gu : NULL, CHAINFD_HOST, err, sizeof err) == 0, "%s", err);
  double worst = 0;
  for (int b = 0; b < B; b++) {
    chainfd_rollout_set_state(m, d, x + (size_t)b * 2 * nv);
    for (int a = 0; a < nu; a++) d->ctrl[a] = u[b * nu + a];
    EXPECT(chainfd_deriv_qacc(one, m, d, NULL, want, want + nn, nu ? want + 2 * nn : NULL, err, sizeof err) == 0, "%s", err);
    const double* g[3] = {gq + b * nn, gv + b * nn, gu + b * nnu};
    size_t cnt[3] = {nn, nn, (size_t)nv * nu};
    for (int k = 0; k < 3; k++) {
      double e = 0, s = 0;
      for (size_t i = 0; i < cnt[k]; i++)
        e = cfd_worst(e, fabs(g[k][i] - want[k * nn + i])), s = fmax(s, fabs(want[k * nn + i]));
      worst = cfd_worst(worst, e / fmax(s, 1e-300));
    }
  }
  printf("%-60s batch of %d on %s against one call each: %.2e\n", spec, B,
         device == CHAINFD_CPU ? "the CPU" : "GPU 0", worst);
  EXPECT(device == CHAINFD_CPU ? worst == 0 : worst < bound, "%s: the batch differs by %.3e", spec, worst);
  free(x); free(u); free(got); free(want);
  mj_deleteData(d);
  chainfd_deriv_free(one);
  chainfd_deriv_free(dv);
  mj_deleteModel(m);
}

static void batch(const char* spec, int device, int B) { batch_within(spec, device, B, 2e-11); }

// a GPU batch with a state the derivatives cannot take (instance `bad` at a joint limit): an error
// naming the instance and the reason
static void gpu_refusal(const char* spec, const char* want) {
  char err[1024] = "";
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  EXPECT(m != NULL, "%s: %s", spec, err);
  if (!m) return;
  chainfd_deriv* dv;
  EXPECT(chainfd_deriv_create(m, 0, &dv, err, sizeof err) == 0, "%s", err);
  int n = m->nv;
  double* x = calloc(3 * 2 * n, sizeof(double));  // three states, the second at a limit
  double* q = malloc(sizeof(double) * 3 * n * n);
  x[2 * n + 1] = 10;
  EXPECT(chainfd_deriv_batch(dv, 3, x, NULL, q, NULL, NULL, CHAINFD_HOST, err, sizeof err) == 1 &&
         strstr(err, want), "%s: want an error with '%s', got '%s'", spec, want, err);
  printf("%-60s GPU refusal: %s\n", spec, err);
  // and the context goes on: a good batch after the refused one
  x[2 * n + 1] = 0;
  EXPECT(chainfd_deriv_batch(dv, 3, x, NULL, q, NULL, NULL, CHAINFD_HOST, err, sizeof err) == 0,
         "%s: after a refusal: %s", spec, err);
  free(x); free(q);
  chainfd_deriv_free(dv);
  mj_deleteModel(m);
}

int main(int argc, char** argv) {
  if (argc > 1 && !strcmp(argv[1], "--gpu")) {
    if (cfd_gpu_device_count() == 0) {
      printf("SKIPPED: no CUDA device\n");
      return 77;
    }
    batch(CHAINFD_SCENES_DIR "/arm7.xml", 0, 1000);
    batch("chain:16,random=1,seed=21,branch=0.3,slide=0.2,damping=0.2,armature=0.02,stiffness=0.5,"
          "actuators=1", 0, 300);
    batch(CHAINFD_TEST_MODELS "/clamped_affine.xml", 0, 100);
    // the warp kernel's edges: more columns and sums than lanes, 32 dofs (the ancestor masks'
    // last bit), no actuators, and a batch larger than the staging so far (it grows)
    batch("chain:30,random=1,seed=3,branch=0.3,damping=0.1,armature=0.01,actuators=1", 0, 200);
    batch("chain:32,random=1,seed=8,damping=0.1,armature=0.01,actuators=1", 0, 64);
    batch("chain:12,random=1,seed=4,armature=0.01", 0, 3000);
    // past 32 dofs, the long chains' kernels and cuSOLVER (a blocked factor: its rounding differs
    // from the CPU's row by row, raised by M's conditioning, which grows with the chain)
    batch_within("chain:33,random=1,seed=8,damping=0.1,armature=0.01,actuators=1", 0, 5, 1e-10);
    batch_within("chain:80,random=1,seed=5,branch=0.3,slide=0.2,damping=0.1,armature=0.01,actuators=1",
                 0, 3, 1e-10);
    batch_within("chain:1000,random=1,seed=3,damping=0.1,armature=0.01", 0, 1, 1e-7);
    gpu_refusal("chain:6,random=1,seed=2,limit=2.5,damping=0.1,armature=0.01,actuators=1",
                "instance 1: a joint at its limit");
    gpu_refusal("chain:40,random=1,seed=2,limit=2.5,damping=0.1,armature=0.01,actuators=1",
                "instance 1: a joint at its limit");
    TEST_EXIT();
  }
  batch(CHAINFD_SCENES_DIR "/arm7.xml", CHAINFD_CPU, 50);
  against_mujoco(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_EULER);
  against_mujoco(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_IMPLICITFAST);
  against_mujoco("chain:16,random=1,seed=21,branch=0.3,slide=0.2,damping=0.2,armature=0.02,"
                 "stiffness=0.5,actuators=1", mjINT_IMPLICITFAST);
  against_mujoco(CHAINFD_TEST_MODELS "/clamped_affine.xml", mjINT_IMPLICITFAST);
  // the constrained path at zero control: implicitfast's diagonal zero, its control term not
  against_mujoco_at(CHAINFD_TEST_MODELS "/velocity_gain_limits.xml", mjINT_IMPLICITFAST, 0);
  against_mujoco(CHAINFD_SCENES_DIR "/arm7.xml", mjINT_RK4);  // (four stages, chained)
  against_mujoco("chain:16,random=1,seed=21,branch=0.3,slide=0.2,damping=0.2,armature=0.02,"
                 "stiffness=0.5,actuators=1", mjINT_RK4);
  errors();
  TEST_EXIT();
}
