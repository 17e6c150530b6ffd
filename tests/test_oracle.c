// Every CPU back end against MuJoCo beyond what `chainfd check` covers: the mass matrix against
// mj_fullM, the joint-diagonal term (h*damping) against (M + hD) qacc = qfrc_smooth solved with
// MuJoCo's own M, gravity off, and the back ends against each other on random chains.
#define _GNU_SOURCE  // mkstemps
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aba_world.h"
#include "aba_world_tree.h"
#include "backend.h"
#include "chain_gen.h"
#include "mj_chain.h"
#include "mj_random.h"
#include "test_util.h"

static const char* models[] = {
    CHAINFD_SCENES_DIR "/arm7.xml",
    CHAINFD_SCENES_DIR "/double_pendulum.xml",
    CHAINFD_SCENES_DIR "/slide_hinge.xml",
    "chain:30,random=1,seed=11,slide=0.3,damping=0.2,armature=0.05,stiffness=1,actuators=1",
    "chain:64,random=1,seed=12,gravity=0,damping=0.1,actuators=2",
    "chain:120,random=1,seed=13,slide=0.2,multijoint=1,armature=0.02",
    "chain:200,random=1,seed=14,damping=0.05,armature=0.01,stiffness=0.5,actuators=1",
};

// trees: ball and free joints, branches, a floating base (test_model only: the chain algorithms
// of the other tests refuse them)
static const char* tree_models[] = {
    "chain:40,random=1,seed=15,branch=0.3,ball=0.3,free=1,slide=0.1,damping=0.1,actuators=1",
    "chain:60,ball=1,damping=0.05,armature=0.01",
    "chain:150,random=1,seed=16,branch=0.5,ball=0.2,multijoint=1,armature=0.01",
    "chain:30,random=1,seed=17,branch=0.2,free=1,stiffness=0.5,armature=0.02,actuators=2",
};

// Solves (A + diag) x = b with MuJoCo's dense Cholesky (A full n x n, overwritten).
static void mj_dense_solve(double* A, const double* diag, const double* b, double* x, int n) {
  for (int i = 0; i < n; i++) A[i * n + i] += diag[i];
  mju_cholFactor(A, n, 0);
  mju_cholSolve(x, A, b, n);
}

static void test_model(const char* spec) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  EXPECT(m != NULL, "load %s: %s", spec, err);
  if (!m) return;
  m->opt.disableflags |= mjDSBL_CONSTRAINT;
  int nv = m->nv;
  mjData* d = mj_makeData(m);
  cfd_chain c;
  EXPECT(cfd_chain_from_model(m, &c, err, sizeof err) == 0, "%s: %s", spec, err);
  double* M = malloc(sizeof(double) * nv * nv);
  double* Mmj = malloc(sizeof(double) * nv * nv);
  double* work = malloc(sizeof(double) * cfd_jsiia_work_size(nv));
  double* diag = malloc(sizeof(double) * nv);
  double* ref = malloc(sizeof(double) * nv);
  double* got = malloc(sizeof(double) * nv);
  double* first = calloc(nv, sizeof(double));
  double worst_M = 0, worst_diag[16] = {0}, worst_cross[16] = {0}, worst_world = 0,
         worst_world_jf = -1;
  cfd_rng rng = {1234};
  int states = nv > 100 ? 5 : 20;
  for (int s = 0; s < states; s++) {
    cfd_random_state(m, d, &rng, CFD_RANDOM_ALL);
    mj_forward(m, d);
    // mass matrix
    mj_fullM(m, d, Mmj);
    double* q = malloc(sizeof(double) * nv);
    cfd_chain_q_from_qpos(&c, d->qpos, q);
    cfd_mass_matrix_cpu(&c, q, M, work);
    // the world-coordinate tree sweeps (the GPU's tree kernel, aba_world_tree.h), their CPU twin
    {
      int* slot = malloc(sizeof(int) * (nv + 1));
      int slots = cfd_wtree_plan(&c, slot);
      double* ww = malloc(sizeof(double) * (CFD_WTREE_LINK_DOUBLES * nv + CFD_WTREE_SLOT_DOUBLES * slots));
      double *qd = malloc(sizeof(double) * nv), *tau = malloc(sizeof(double) * nv);
      double* xw = malloc(sizeof(double) * 6 * m->nbody);
      double* wt = malloc(sizeof(double) * nv);
      cfd_state_from_data(m, d, &c, q, qd, tau, xw);
      mj_fullM(m, d, Mmj);
      double* Mc = malloc(sizeof(double) * nv * nv);
      memcpy(Mc, Mmj, sizeof(double) * nv * nv);
      double* zero = calloc(nv, sizeof(double));
      mj_dense_solve(Mc, zero, d->qfrc_smooth, ref, nv);
      int st = cfd_aba_world_tree(&c, 0, slot, q, qd, tau, NULL, wt, 1, ww, 1);
      EXPECT(st == 0, "%s: world tree status %d", spec, st);
      worst_world = cfd_worst(worst_world, cfd_rel_err_inf(wt, ref, nv));
      cfd_chain cj;  // and in joint frames, as the GPU takes them
      if (cfd_chain_in_joint_frames(&c, &cj) == 0) {
        st = cfd_aba_world_tree(&cj, 1, slot, q, qd, tau, NULL, wt, 1, ww, 1);
        EXPECT(st == 0, "%s: world tree (joint frames) status %d", spec, st);
        worst_world_jf = cfd_worst(worst_world_jf, cfd_rel_err_inf(wt, ref, nv));
        cfd_chain_free(&cj);
      }
      free(slot); free(ww); free(qd); free(tau); free(xw); free(wt); free(Mc); free(zero);
    }
    free(q);
    double e = cfd_rel_err_inf(M, Mmj, nv * nv);
    worst_M = cfd_worst(worst_M, e);
    // joint-diagonal term: h * damping, as implicit damping adds it
    for (int i = 0; i < nv; i++) diag[i] = 0.002 * cfd_rng_uniform(&rng, 0, 50);
    mj_dense_solve(Mmj, diag, d->qfrc_smooth, ref, nv);
    for (int b = 0; b < cfd_backend_count(); b++) {
      if (cfd_backend_get(b)->gpu_algorithm >= 0) continue;  // test_gpu covers the GPU
      const char* name = cfd_backend_get(b)->name;
      cfd_solver* sv = cfd_solver_create(m, name, err, sizeof err);
      // the refusals expected: CFA on a link with a singular inertia (massless inner bodies of
      // multi-joint bodies, slide_hinge's wrist) or on a tree; test_refusals covers the messages
      int may_refuse = strstr(name, ".cfa") && (strstr(spec, "multijoint=1") || strstr(spec, "slide_hinge") ||
                                                 !cfd_chain_is_serial(&c));
      int dca_tree = strstr(name, ".dca") && cfd_chain_shape(&c) == CFD_SHAPE_TREE;  // (chains only)
      EXPECT(sv || (may_refuse && (strstr(err, "singular") || strstr(err, "serial chains"))) ||
                 (dca_tree && strstr(err, "starts a branch of the kinematic tree")),
             "%s %s: unexpected refusal: %s", spec, name, err);
      if (!sv) {
        worst_diag[b] = worst_cross[b] = -1;
        continue;
      }
      int st = cfd_solver_qacc(sv, m, d, diag, got, err, sizeof err);
      EXPECT(st == 0, "%s %s: %s", spec, cfd_backend_get(b)->name, err);
      e = cfd_rel_err_inf(got, ref, nv);
      worst_diag[b] = cfd_worst(worst_diag[b], e);
      if (b == 0) {  // cpu.fast: never refuses; the others are held to it
        memcpy(first, got, sizeof(double) * nv);
      } else {
        e = cfd_rel_err_inf(got, first, nv);
        worst_cross[b] = cfd_worst(worst_cross[b], e);
      }
      cfd_solver_free(sv);
    }
  }
  printf("%s\n  mass matrix vs mj_fullM: %.2e\n  world-coordinate tree sweeps (no h*damping) vs "
         "MuJoCo's M: %.2e, in joint frames %.2e\n", spec, worst_M, worst_world, worst_world_jf);
  EXPECT(worst_M <= 1e-12, "%s: M vs mj_fullM %.3e", spec, worst_M);
  EXPECT(worst_world <= 1e-10 && worst_world_jf >= 0 && worst_world_jf <= 1e-10,
         "%s: world tree sweeps %.3e, in joint frames %.3e", spec, worst_world, worst_world_jf);
  for (int b = 0; b < cfd_backend_count(); b++) {
    if (cfd_backend_get(b)->gpu_algorithm >= 0) continue;
    if (worst_diag[b] < 0) {
      printf("  %-10s refused (singular link, or a tree)\n", cfd_backend_get(b)->name);
      continue;
    }
    printf("  %-10s with h*damping vs MuJoCo's M: %.2e   vs %s: %.2e\n", cfd_backend_get(b)->name,
           worst_diag[b], cfd_backend_get(0)->name, worst_cross[b]);
    EXPECT(worst_diag[b] <= 1e-10, "%s %s: %.3e", spec, cfd_backend_get(b)->name, worst_diag[b]);
    EXPECT(worst_cross[b] <= 1e-10, "%s %s vs %s: %.3e", spec, cfd_backend_get(b)->name,
           cfd_backend_get(0)->name, worst_cross[b]);
  }
  cfd_chain_free(&c);
  free(M); free(Mmj); free(work); free(diag); free(ref); free(got); free(first);
  mj_deleteData(d);
  mj_deleteModel(m);
}

// At an equilibrium qacc is rounding noise: every back end must return it, not refuse. (A
// convergence test that weighs corrections against qacc alone would refuse these states: the
// 7-dof arm holding still against gravity.)
static void test_equilibrium(void) {
  char err[1024];
  mjModel* m = cfd_load_model(CHAINFD_SCENES_DIR "/arm7.xml", err, sizeof err);
  m->opt.disableflags |= mjDSBL_CONSTRAINT | mjDSBL_ACTUATION | mjDSBL_DAMPER | mjDSBL_SPRING;
  mjData* d = mj_makeData(m);
  cfd_rng rng = {3};
  cfd_random_state(m, d, &rng, CFD_RANDOM_QPOS);  // at rest somewhere
  mj_forward(m, d);
  memcpy(d->qfrc_applied, d->qfrc_bias, sizeof(double) * m->nv);  // held exactly against gravity
  mj_forward(m, d);
  double got[64];
  for (int b = 0; b < cfd_backend_count(); b++) {
    if (cfd_backend_get(b)->gpu_algorithm >= 0) continue;
    cfd_solver* sv = cfd_solver_create(m, cfd_backend_get(b)->name, err, sizeof err);
    int st = cfd_solver_qacc(sv, m, d, NULL, got, err, sizeof err);
    double big = 0;
    for (int i = 0; i < m->nv; i++) big = cfd_worst(big, fabs(got[i]));
    printf("equilibrium %-10s status %d max|qacc| %.1e (MuJoCo %.1e)\n", cfd_backend_get(b)->name, st,
           big, fabs(d->qacc[0]));
    EXPECT(st == 0 && big <= 1e-9, "%s held at rest: status %d (%s), |qacc| %.3e",
           cfd_backend_get(b)->name, st, err, big);
    cfd_solver_free(sv);
  }
  mj_deleteData(d);
  mj_deleteModel(m);
}

// Hinge angles far from zero, at multiples of pi/2 and past 2^20 rad: cpu.fast's own sin/cos
// (range reduction, quadrants, and libm beyond its range) against MuJoCo. cpu.abia is printed
// beside it, not held to it: cfd_screw_exp's translation loses about q * 1e-16 relative for an
// axis off the link origin (q v and q w x (w x v) cancel), 4e-9 at q = 3e8 rad.
static void test_far_angles(void) {
  static const char* specs[] = {CHAINFD_SCENES_DIR "/arm7.xml", CHAINFD_SCENES_DIR "/slide_hinge.xml"};
  static const double offsets[] = {0, 1000.25, -70001.5, 300000.0, 1048575.0, -5e6, 3e8};
  char err[1024];
  for (int k = 0; k < 2; k++) {
    mjModel* m = cfd_load_model(specs[k], err, sizeof err);
    m->opt.disableflags |= mjDSBL_CONSTRAINT;
    mjData* d = mj_makeData(m);
    cfd_solver* fast = cfd_solver_create(m, "cpu.fast", err, sizeof err);
    cfd_solver* abia = cfd_solver_create(m, "cpu.abia", err, sizeof err);
    double a[64], b[64], worst = 0, worst_mj = 0;
    cfd_rng rng = {77};
    for (int s = 0; s < 40; s++) {
      cfd_random_state(m, d, &rng, CFD_RANDOM_ALL);
      for (int j = 0; j < m->njnt; j++) {
        if (m->jnt_type[j] != mjJNT_HINGE) continue;
        double off = offsets[(s + j) % 7];
        if (s % 5 == 4) off = (double)((s + j) * 100003) * (M_PI / 2);  // at a quadrant boundary
        d->qpos[m->jnt_qposadr[j]] += off;
      }
      mj_forward(m, d);
      int st = cfd_solver_qacc(fast, m, d, NULL, a, err, sizeof err) |
               cfd_solver_qacc(abia, m, d, NULL, b, err, sizeof err);
      EXPECT(st == 0, "%s far angles: %s", specs[k], err);
      worst = cfd_worst(worst, cfd_rel_err_inf(a, b, m->nv));
      worst_mj = cfd_worst(worst_mj, cfd_rel_err_inf(a, d->qacc, m->nv));
    }
    printf("far angles %s: cpu.fast vs cpu.abia %.2e, vs mj_forward %.2e\n", specs[k], worst, worst_mj);
    EXPECT(worst_mj <= 1e-11, "%s far angles: cpu.fast vs MuJoCo %.3e", specs[k], worst_mj);
    cfd_solver_free(fast);
    cfd_solver_free(abia);
    mj_deleteData(d);
    mj_deleteModel(m);
  }
}

// A screw with pitch has no joint frame (cfd_fast_prepare refuses it): cpu.fast must then take
// the sweeps in link frames and still agree with the reference ABIA.
static void test_pitched_screw(void) {
  char err[1024];
  mjModel* m = cfd_load_model(CHAINFD_SCENES_DIR "/arm7.xml", err, sizeof err);
  cfd_chain c;
  EXPECT(cfd_chain_from_model(m, &c, err, sizeof err) == 0, "arm7: %s", err);
  int n = c.n;
  for (int k = 0; k < 3; k++) c.screw[6 * 3 + 3 + k] += 0.05 * c.screw[6 * 3 + k];  // link 3: pitch 0.05
  double q[64], qd[64], tau[64], a[64], b[64];
  for (int i = 0; i < n; i++) q[i] = 0.3 * i - 1, qd[i] = 0.2 - 0.1 * i, tau[i] = 0.5 * i;
  double* w1 = malloc(sizeof(double) * cfd_fast_work_size(n));
  double* w2 = malloc(sizeof(double) * cfd_abia_work_size(n));
  EXPECT(cfd_fast_prepare(&c, w1) == 1, "a pitched screw was given a joint frame");
  int st = cfd_fd_fast_prepared(&c, q, qd, tau, NULL, a, w1) | cfd_fd_abia_cpu(&c, q, qd, tau, NULL, b, w2);
  double e = cfd_rel_err_inf(a, b, n);
  printf("pitched screw: cpu.fast vs cpu.abia %.2e\n", e);
  EXPECT(st == 0 && e <= 1e-13, "pitched screw: status %d, cpu.fast vs cpu.abia %.3e", st, e);
  free(w1); free(w2);
  cfd_chain_free(&c);
  mj_deleteModel(m);
}

// The world-frame ABA (aba_world.h: the GPU's batch kernel for short chains, run here on the CPU)
// against the reference, on every model with random states and joint-diagonal terms, and on a
// pitched screw. Its rounding grows with the chain's extent in link lengths (the world origin is
// its reference point, where the chain's base is moved): within 1e-11 up to 32 links, where the GPU
// uses it, with a wide margin even with the base 100 m away; at 64 links with gravity off the
// bound is looser, 1e-9 (figures: docs/RESULTS.md).
static void test_aba_world(void) {
  char err[1024];
  size_t nm = sizeof(models) / sizeof(models[0]);
  for (size_t k = 0; k < nm + 2; k++) {
    int pitched = k == nm, far = k == nm + 1;  // then the arm with its base 100 m from the origin
    const char* spec = k >= nm ? models[0] : models[k];
    mjModel* m = cfd_load_model(spec, err, sizeof err);
    EXPECT(m != NULL, "%s: %s", spec, err);
    if (!m) continue;
    cfd_chain c;
    EXPECT(cfd_chain_from_model(m, &c, err, sizeof err) == 0, "%s: %s", spec, err);
    int n = c.n;
    if (pitched)
      for (int j = 0; j < 3; j++) c.screw[6 * 3 + 3 + j] += 0.05 * c.screw[6 * 3 + j];
    if (far) c.home_p[0] += 70, c.home_p[1] -= 70, c.home_p[2] += 10;
    cfd_chain cj;
    int has_jf = cfd_chain_in_joint_frames(&c, &cj) == 0;
    EXPECT(has_jf == !pitched, "%s: joint frames %d for a chain %s pitch", spec, has_jf,
           pitched ? "with" : "without");
    double *v = malloc(sizeof(double) * (6 * n + CFD_ABW_LINK_DOUBLES * n));
    double *q = v, *qd = q + n, *tau = qd + n, *ex = tau + n, *a = ex + n, *ref = a + n;
    double* w = ref + n;
    double* split_work = malloc(sizeof(double) * cfd_abia_split_work_size(n));
    cfd_rng r = {77 + k};
    double worst = 0, worst_split = 0;
    for (int s = 0; s < 20; s++) {
      for (int i = 0; i < n; i++) {
        q[i] = cfd_rng_uniform(&r, -3.14, 3.14);
        qd[i] = cfd_rng_uniform(&r, -2, 2);
        tau[i] = cfd_rng_uniform(&r, -1, 1);
        ex[i] = s % 2 ? cfd_rng_uniform(&r, 0, 0.1) : 0;
      }
      cfd_fd_reference(&c, q, qd, tau, s % 2 ? ex : NULL, ref);
      for (int jf = 0; jf < 2; jf++) {  // in link frames, and in joint frames where it has them
        if (jf && !has_jf) continue;
        int st = cfd_aba_world(jf ? &cj : &c, jf, q, qd, tau, s % 2 ? ex : NULL, a, 1, w, 1);
        EXPECT(st == 0, "%s: world ABA (jf %d) status %d", spec, jf, st);
        double e = cfd_rel_err_inf(a, ref, n);
        worst = cfd_worst(worst, e);
        // the split call's twin: the factors about each block's origin, then the host's half
        for (int i = 0; i < n; i++) a[i] = NAN;
        st = cfd_fd_abia_split_cpu(jf ? &cj : &c, jf, q, qd, tau, s % 2 ? ex : NULL, a, split_work);
        EXPECT(st == 0, "%s: split ABA (jf %d) status %d", spec, jf, st);
        e = cfd_rel_err_inf(a, ref, n);
        worst_split = cfd_worst(worst_split, e);
      }
    }
    printf("world ABA %s%s (n=%d): max_rel_err %.2e, split %.2e\n", spec,
           pitched ? " pitched" : far ? " base 100 m away" : "", n, worst, worst_split);
    EXPECT(worst <= (n <= 32 ? 1e-11 : 1e-9), "%s: world ABA vs reference %.3e", spec, worst);
    EXPECT(worst_split <= (n <= 32 ? 1e-11 : 1e-9), "%s: split ABA vs reference %.3e", spec,
           worst_split);
    if (k == nm - 1) {  // a massless tip: the status says so, and qacc is not written
      for (int j = 0; j < 36; j++) c.inertia[36 * (n - 1) + j] = 0;
      c.armature[n - 1] = 0;
      for (int i = 0; i < n; i++) a[i] = 5;
      int st = cfd_fd_abia_split_cpu(&c, 0, q, qd, tau, NULL, a, split_work);
      EXPECT(st == CFD_ERR_SINGULAR && a[0] == 5, "%s massless tip: split status %d", spec, st);
    }
    free(v);
    free(split_work);
    if (has_jf) cfd_chain_free(&cj);
    cfd_chain_free(&c);
    mj_deleteModel(m);
  }
}

// CFA's refinement refuses what it cannot show converged: a single step (no contraction to judge
// by), and a 2048-link random chain, where the steps do not contract; the long-double residual
// (cfd_cfa_options.residual_ld) reaches the reference where the iteration does contract.
static void test_cfa_refusals(void) {
  char err[1024];
  mjModel* m = cfd_load_model("chain:1000,random=1,seed=1,armature=0.01", err, sizeof err);
  cfd_chain base;
  int ok = m && !cfd_chain_from_model(m, &base, err, sizeof err);
  EXPECT(ok, "chain:1000: %s", err);
  if (m) mj_deleteModel(m);
  if (!ok) return;
  const int sizes[2] = {200, 2048};
  for (int k = 0; k < 2; k++) {
    int n = sizes[k];
    cfd_chain c;
    double* v = malloc(sizeof(double) * 5 * n);
    double* w = malloc(sizeof(double) * cfd_cfa_work_size(n));
    if (!v || !w || cfd_chain_tile(&base, n, &c)) {
      EXPECT(0, "%d links: out of memory", n);
      free(v);
      free(w);
      break;
    }
    double *q = v, *qd = q + n, *tau = qd + n, *ref = tau + n, *x = ref + n;
    cfd_rng rng = {7 + k};
    for (int i = 0; i < n; i++) {
      q[i] = cfd_rng_uniform(&rng, -3.14, 3.14);
      qd[i] = cfd_rng_uniform(&rng, -2, 2);
      tau[i] = cfd_rng_uniform(&rng, -1, 1);
    }
    cfd_fd_reference(&c, q, qd, tau, NULL, ref);
    int st = cfd_fd_cfa_cpu(&c, q, qd, tau, NULL, x, w);
    printf("cpu.cfa %d tiled links: status %d, error %.2e\n", n, st, cfd_rel_err_inf(x, ref, n));
    if (n == 200) {
      EXPECT(st == 0 && cfd_rel_err_inf(x, ref, n) < 1e-12, "cpu.cfa at 200 links: status %d", st);
      const cfd_cfa_options ld = {.residual_ld = 1}, one_step = {.refine_steps = 1};
      st = cfd_fd_cfa_cpu_ex(&c, &ld, q, qd, tau, NULL, x, w);
      // (1e-15 where long double is wider than double: x87's 64-bit mantissa here)
      EXPECT(st == 0 && cfd_rel_err_inf(x, ref, n) < (sizeof(long double) > sizeof(double) ? 1e-15 : 1e-14),
             "cpu.cfa with the long-double residual: status %d, error %.2e", st, cfd_rel_err_inf(x, ref, n));
      st = cfd_fd_cfa_cpu_ex(&c, &one_step, q, qd, tau, NULL, x, w);
      EXPECT(st == CFD_ERR_INACCURATE, "one refinement step was accepted (status %d)", st);
    } else {
      EXPECT(st == CFD_ERR_INACCURATE, "cpu.cfa at %d links: status %d, error %.2e", n, st,
             cfd_rel_err_inf(x, ref, n));
    }
    free(v);
    free(w);
    cfd_chain_free(&c);
  }
  cfd_chain_free(&base);
}

// ABIA as scans over blocks (aba_scan.h, the GPU scan kernel's CPU twin) against the reference:
// on every model with random states and joint-diagonal terms, blocks of 1, 2, 5 and 32 links (a
// block never ends after a massless inner link: the 120-link model has multi-joint bodies), and
// on tiled random chains of up to 16,384 links, where CFA refuses (test_cfa_refusals) and the
// scan must stay as accurate as the sequential sweeps (cpu.fast, printed beside it).
// The chain of spec (an MJCF file or a generated chain), its links repeated to `tile` links when
// tile > 0 (cfd_chain_tile). 0, or 1 with a failed check.
static int scan_chain(const char* spec, int tile, cfd_chain* c) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  cfd_chain base;
  int ok = m && !cfd_chain_from_model(m, &base, err, sizeof err);
  EXPECT(ok, "%s: %s", spec, err);
  if (m) mj_deleteModel(m);
  if (!ok) return 1;
  if (!tile) {
    *c = base;
    return 0;
  }
  ok = !cfd_chain_tile(&base, tile, c);
  cfd_chain_free(&base);
  EXPECT(ok, "%s tiled to %d links: out of memory", spec, tile);
  return !ok;
}

// One random state of c (q uniform in +-qmax, qd in +-2, tau in +-1, a joint-diagonal term in
// [0, 0.1]) and its reference qacc
static void random_state(const cfd_chain* c, double qmax, unsigned seed, double* q, double* qd,
                         double* tau, double* extra, double* ref) {
  cfd_rng rng = {seed};
  for (int i = 0; i < c->n; i++) {
    q[i] = cfd_rng_uniform(&rng, -qmax, qmax);
    qd[i] = cfd_rng_uniform(&rng, -2, 2);
    tau[i] = cfd_rng_uniform(&rng, -1, 1);
    extra[i] = cfd_rng_uniform(&rng, 0, 0.1);
  }
  cfd_fd_reference(c, q, qd, tau, extra, ref);
}

// The scan twin on c against the reference, one random state (q uniform in +-qmax; a ball's
// three: a rotation vector) with joint-diagonal terms, blocks of L[0..3] links (cpu.fast's error
// printed beside it when fast). 1e-11 up to 200 links, then growing linearly with the chain, as
// its rounding does (still tighter than cpu.fast's error on the longest chains; figures:
// docs/RESULTS.md).
static void scan_against_reference(const cfd_chain* c, const char* label, const int L[4],
                                   double qmax, unsigned seed, int fast) {
  int n = c->n;
  double* v = malloc(sizeof(double) * 6 * n);
  size_t ws = cfd_abia_scan_work_size(n) > cfd_fast_work_size(n) ? cfd_abia_scan_work_size(n)
                                                                  : cfd_fast_work_size(n);
  double* w = malloc(sizeof(double) * ws);
  EXPECT(v && w, "%d links: out of memory", n);
  if (v && w) {
    double *q = v, *qd = q + n, *tau = qd + n, *extra = tau + n, *ref = extra + n, *x = ref + n;
    random_state(c, qmax, seed, q, qd, tau, extra, ref);
    int st = 0;
    double worst = 0;
    printf("abia scan, %s (%d links):", label, n);
    if (fast) {
      st |= cfd_fd_fast_cpu(c, q, qd, tau, extra, x, w);
      printf(" cpu.fast %.2e,", cfd_rel_err_inf(x, ref, n));
    }
    printf(" blocks of");
    for (int j = 0; j < 4; j++) {
      st |= cfd_fd_abia_scan_cpu(c, L[j], q, qd, tau, extra, x, w);
      double e = cfd_rel_err_inf(x, ref, n);
      printf(" %d: %.2e", L[j], e);
      worst = cfd_worst(worst, e);
    }
    printf("\n");
    double bound = n <= 200 ? 1e-11 : 1e-11 * n / 200;
    EXPECT(st == 0 && worst <= bound, "abia scan, %s, %d links: status %d, error %.2e (bound %.1e)",
           label, n, st, worst, bound);
  }
  free(v);
  free(w);
}

// DCAe (cpu/dca_cpu.c) the same way, subsystems of L[0..3] links (1: every link its own, the
// assembly tree's depth the chain's log2; a ball's links split): 1e-11 up to 200 links, then
// 2e-11 per 100 links. Past 1000 links its rounding is the sequential sweeps' (cpu.fast: 1.2e-10
// at 1024 links, 1.5e-9 at 16384), up to a few times the scans' (the figures: docs/RESULTS.md).
static void dca_against_reference(const cfd_chain* c, const char* label, const int L[4],
                                  double qmax, unsigned seed) {
  int n = c->n;
  double* v = malloc(sizeof(double) * 6 * n);
  double* w = malloc(sizeof(double) * cfd_dca_work_size_ex(n, 1));
  EXPECT(v && w, "%d links: out of memory", n);
  if (v && w) {
    double *q = v, *qd = q + n, *tau = qd + n, *extra = tau + n, *ref = extra + n, *x = ref + n;
    random_state(c, qmax, seed, q, qd, tau, extra, ref);
    int st = 0;
    double worst = 0;
    printf("dca, %s (%d links): subsystems of", label, n);
    for (int j = 0; j < 4; j++) {
      st |= cfd_fd_dca_cpu_ex(c, L[j], q, qd, tau, extra, x, w);
      double e = cfd_rel_err_inf(x, ref, n);
      printf(" %d: %.2e", L[j], e);
      worst = cfd_worst(worst, e);
    }
    printf("\n");
    double bound = n <= 200 ? 1e-11 : 2e-11 * n / 100;
    EXPECT(st == 0 && worst <= bound, "dca, %s, %d links: status %d, error %.2e (bound %.1e)", label,
           n, st, worst, bound);
  }
  free(v);
  free(w);
}

static void test_abia_scan(void) {
  size_t nm = sizeof(models) / sizeof(models[0]);
  const int blocks[4] = {1, 2, 5, 32}, tiled_blocks[4] = {8, 32, 128, 512};
  for (size_t k = 0; k < nm + 3; k++) {
    int tiled = k >= nm ? 1024 << (2 * (int)(k - nm)) : 0;  // 1024, 4096, 16384
    cfd_chain c;
    if (scan_chain(tiled ? "chain:1000,random=1,seed=1,armature=0.01" : models[k], tiled, &c)) continue;
    scan_against_reference(&c, tiled ? "tiled" : models[k], tiled ? tiled_blocks : blocks, 3.14,
                           99 + (unsigned)k, 1);
    dca_against_reference(&c, tiled ? "tiled" : models[k], tiled ? tiled_blocks : blocks, 3.14,
                          99 + (unsigned)k);
    cfd_chain_free(&c);
  }
}

// The scans on one chain with ball and free joints (CFD_LINK_BALL links in a serial chain): a
// block may start or end inside a ball where armature lets it end there (blocks of 1 and 2 links
// split every ball), and a ball's later links take their velocity term from links in the block
// before. Against the long-double reference, as above; a 1000-ball chain (3000 links) tiled.
static void test_abia_scan_balls(void) {
  static const char* specs[] = {
      "chain:60,ball=1,damping=0.05,armature=0.01",                   // every ball split at L = 1
      "chain:50,random=1,seed=21,ball=0.4,multijoint=1,slide=0.1",    // no armature: balls whole
      "chain:30,random=1,seed=22,free=1,ball=0.3,armature=0.02",      // a floating snake
      "chain:100,ball=1,armature=0.001",                              // tiled to 1000 balls below
  };
  const int blocks[4] = {1, 2, 5, 32}, tiled_blocks[4] = {8, 32, 128, 512};
  for (size_t k = 0; k < sizeof(specs) / sizeof(specs[0]); k++) {
    int tiled = k == 3 ? 3000 : 0;
    cfd_chain c;
    if (scan_chain(specs[k], tiled, &c)) continue;
    int balls = 0;
    for (int i = 0; i < c.n; i++) balls += c.kind[i] == CFD_LINK_BALL;
    EXPECT(balls > 0 && cfd_chain_shape(&c) == CFD_SHAPE_BALL_CHAIN,
           "%s: %d balls, shape %d (the test needs one chain with balls)", specs[k], balls,
           cfd_chain_shape(&c));
    scan_against_reference(&c, specs[k], tiled ? tiled_blocks : blocks, 1.5, 7 + (unsigned)k, 0);
    dca_against_reference(&c, specs[k], tiled ? tiled_blocks : blocks, 1.5, 7 + (unsigned)k);
    cfd_chain_free(&c);
  }
}

// chainfd export: a generated chain written as MJCF and loaded back is the same model, up to the
// writer's six significant digits: sizes, names and mj_forward's qacc on one state (1e-5
// relative: the rounded inertias and frames move it by about 1e-6)
static void test_export_round_trip(void) {
  const char* spec = "chain:30,random=1,seed=3,slide=0.2,damping=0.1,armature=0.01,stiffness=1,actuators=1";
  char err[1024] = "", path[] = "/tmp/chainfd_export_XXXXXX.xml";
  cfd_chain_gen g;
  if (cfd_chain_gen_parse(spec, &g, err, sizeof err)) {
    EXPECT(0, "parse: %s", err);
    return;
  }
  int fd = mkstemps(path, 4);
  EXPECT(fd >= 0, "mkstemps failed");
  if (fd < 0) return;
  close(fd);
  EXPECT(!cfd_chain_save_xml(&g, path, err, sizeof err), "save: %s", err);
  mjModel* a = cfd_chain_generate(&g, err, sizeof err);
  mjModel* b = mj_loadXML(path, NULL, err, sizeof err);
  remove(path);
  EXPECT(a && b, "load back: %s", err);
  int same = a && b && a->nbody == b->nbody && a->njnt == b->njnt && a->nq == b->nq &&
             a->nv == b->nv && a->nu == b->nu;
  if (a && b)
    EXPECT(same, "sizes differ: nbody %d/%d njnt %d/%d nq %d/%d nv %d/%d nu %d/%d", (int)a->nbody,
           (int)b->nbody, (int)a->njnt, (int)b->njnt, (int)a->nq, (int)b->nq, (int)a->nv, (int)b->nv,
           (int)a->nu, (int)b->nu);
  if (same) {
    const char* name = mj_id2name(b, mjOBJ_JOINT, 5);
    EXPECT(name && !strcmp(name, "j5"), "joint names lost");
    mjData *da = mj_makeData(a), *db = mj_makeData(b);
    cfd_rng rng = {9};
    cfd_random_state(a, da, &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL | CFD_RANDOM_CTRL);
    mju_copy(db->qpos, da->qpos, a->nq);
    mju_copy(db->qvel, da->qvel, a->nv);
    mju_copy(db->ctrl, da->ctrl, a->nu);
    mj_forward(a, da);
    mj_forward(b, db);
    double num = 0, den = 0;  // (cfd_worst: a NaN is the worst)
    for (int i = 0; i < a->nv; i++) {
      num = cfd_worst(num, fabs(da->qacc[i] - db->qacc[i]));
      den = cfd_worst(den, fabs(da->qacc[i]));
    }
    printf("export round trip %s: qacc apart by %.2e relative\n", spec, num / den);
    EXPECT(num <= 1e-5 * den, "exported model's qacc apart by %.3e relative", num / den);
    mj_deleteData(da);
    mj_deleteData(db);
  }
  mj_deleteModel(a);
  mj_deleteModel(b);
}

int main(void) {
  test_export_round_trip();
  test_abia_scan();
  test_abia_scan_balls();
  test_cfa_refusals();
  test_aba_world();
  test_equilibrium();
  test_pitched_screw();
  test_far_angles();
  for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) test_model(models[i]);
  for (size_t i = 0; i < sizeof(tree_models) / sizeof(tree_models[0]); i++) test_model(tree_models[i]);
  TEST_EXIT();
}
