// chainfd-bench-deriv: chainfd's analytical derivatives against MuJoCo's finite differences, side
// by side in one run, on one core and on all cores (issue: dynamics gradients).
//
//   chainfd-bench-deriv [--model FILE|chain:...]... [--reps R] [--threads T]
//
// Per model, at one seeded random state with its controls, medians over R timed batches on one
// core:
//   deriv_qv_us:  chainfd_deriv_qacc, d qacc / d(q, qvel)
//   deriv_all_us: the same with d qacc / d ctrl and qacc
//   trans_us:     chainfd_transition_derivatives (A, B)
//   mjd_fd_us:    mjd_transitionFD, centred (eps 1e-6), A and B (2 (2 nv + nu) steps)
//   mjd_fwd_us:   mjd_transitionFD, forward differences (2 nv + nu + 1 steps)
// and the ratios of mjd_transitionFD's centred time to chainfd's. Then on T threads (default: every
// core), each with its own context and mjData, the same calls at once: gradients per second of
// d qacc / d(q, qvel) (all_qv_per_s) and of mjd_transitionFD centred (all_fd_per_s), their ratio.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mujoco/mujoco.h>

#include "chain_gen.h"
#include "chainfd_deriv.h"
#include "cfd_median.h"
#include "mj_random.h"
#include "pool.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// median us per call of `what` over `reps` batches of `calls` calls
enum { QV, ALL, TRANS, MJD_C, MJD_F };
static double time_calls(int what, int reps, int calls, chainfd_deriv* dv, const mjModel* m,
                         mjData* d, double* a, double* b, double* c) {
  double* t = malloc(sizeof(double) * reps);
  char err[256];
  int nv = m->nv;
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    for (int k = 0; k < calls; k++) {
      int st = 0;
      if (what == QV) st = chainfd_deriv_qacc(dv, m, d, NULL, a, b, NULL, err, sizeof err);
      else if (what == ALL) st = chainfd_deriv_qacc(dv, m, d, c, a, b, c + nv, err, sizeof err);
      else if (what == TRANS) st = chainfd_transition_derivatives(dv, m, d, a, b, err, sizeof err);
      else mjd_transitionFD(m, d, 1e-6, what == MJD_C, a, m->nu ? b : NULL, NULL, NULL);
      if (st) {
        fprintf(stderr, "%s\n", err);
        exit(1);
      }
    }
    t[r] = (now() - t0) / calls * 1e6;
  }
  double med = cfd_median(t, reps);
  free(t);
  return med;
}

// ---- all cores: every thread its own context and data, `calls` calls each per batch -------------
typedef struct {
  const mjModel* m;
  chainfd_deriv** dv;
  mjData** d;
  double** buf;  // a, b, c per thread
  int what, calls;
} all_job;

static void all_worker(void* arg, int t, int T) {
  (void)T;
  all_job* j = arg;
  char err[256];
  int nv = j->m->nv;
  double *a = j->buf[3 * t], *b = j->buf[3 * t + 1], *c = j->buf[3 * t + 2];
  for (int k = 0; k < j->calls; k++) {
    if (j->what == QV) {
      if (chainfd_deriv_qacc(j->dv[t], j->m, j->d[t], NULL, a, b, NULL, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
      }
    } else {
      mjd_transitionFD(j->m, j->d[t], 1e-6, 1, a, j->m->nu ? b : NULL, NULL, NULL);
    }
  }
  (void)c;
  (void)nv;
}

// gradients per second on T threads (median of reps batches of `calls` a thread)
static double all_cores(cfd_pool* pool, all_job* j, int what, int calls, int reps) {
  double* t = malloc(sizeof(double) * reps);
  j->what = what, j->calls = calls;
  if (reps > 1) cfd_pool_run(pool, all_worker, j);  // (warm, unless a call is long)
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    cfd_pool_run(pool, all_worker, j);
    t[r] = now() - t0;
  }
  double med = cfd_median(t, reps);
  free(t);
  return (double)pool->T * calls / med;
}

static void bench_model(const char* spec, int reps, cfd_pool* pool) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  if (!m) {
    fprintf(stderr, "%s: %s\n", spec, err);
    exit(1);
  }
  chainfd_deriv* dv;
  if (chainfd_deriv_create(m, CHAINFD_CPU, &dv, err, sizeof err)) {
    printf("%s: %s\n", spec, err);
    mj_deleteModel(m);
    return;
  }
  mjData* d = mj_makeData(m);
  cfd_rng rng = {7};
  cfd_random_state(m, d, &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL | CFD_RANDOM_CTRL);
  for (int i = 0; i < m->nq; i++) d->qpos[i] *= 0.3;  // (inside the limits of a limited model)
  mj_forward(m, d);
  int nv = m->nv, nu = m->nu, nx = 2 * nv;
  double* a = malloc(sizeof(double) * nx * nx);
  double* b = malloc(sizeof(double) * (nx * nx + nx * (nu ? nu : 1)));
  double* c = malloc(sizeof(double) * (nv + nv * (nu ? nu : 1)));
  // calls per batch: enough mjd_transitionFD calls to outlast the clock's resolution
  double one = time_calls(MJD_C, 1, 1, dv, m, d, a, b, c);
  int calls_fd = one > 1000 ? 1 : (int)(1000 / (one > 1 ? one : 1)) + 1;
  // (past a second a call, the first call is the figure and forward differences are skipped)
  double t_fd = one > 1e6 ? one : time_calls(MJD_C, reps, calls_fd, dv, m, d, a, b, c);
  double t_fwd = one > 1e6 ? NAN : time_calls(MJD_F, reps, calls_fd, dv, m, d, a, b, c);
  int calls = calls_fd * 10;
  double t_qv = time_calls(QV, reps, calls, dv, m, d, a, b, c);
  double t_all = time_calls(ALL, reps, calls, dv, m, d, a, b, c);
  double t_tr = time_calls(TRANS, reps, calls, dv, m, d, a, b, c);
  printf("model=%s nv=%d nu=%d deriv_qv_us=%.3g deriv_all_us=%.3g trans_us=%.3g mjd_fd_us=%.4g "
         "mjd_fwd_us=%.4g ratio_qv=%.1f ratio_trans=%.1f\n", spec, nv, nu, t_qv, t_all, t_tr, t_fd,
         t_fwd, t_fd / t_qv, t_fd / t_tr);
  fflush(stdout);
  int T = pool->T;
  all_job j = {m, calloc(T, sizeof(chainfd_deriv*)), calloc(T, sizeof(mjData*)),
               calloc(3 * T, sizeof(double*)), 0, 0};
  for (int t = 0; t < T; t++) {
    if (chainfd_deriv_create(m, CHAINFD_CPU, &j.dv[t], err, sizeof err)) {
      fprintf(stderr, "%s\n", err);
      exit(1);
    }
    j.d[t] = mj_copyData(NULL, m, d);
    j.buf[3 * t] = malloc(sizeof(double) * nx * nx);
    j.buf[3 * t + 1] = malloc(sizeof(double) * (nx * nx + nx * (nu ? nu : 1)));
    j.buf[3 * t + 2] = malloc(sizeof(double) * (nv + nv * (nu ? nu : 1)));
  }
  // a thread's calls per batch: enough that a batch outlasts the clock's resolution, at least one
  int fd_calls = t_fd > 2e4 ? 1 : (int)(2e4 / t_fd) + 1, qv_calls = t_qv > 2e4 ? 1 : (int)(2e4 / t_qv) + 1;
  int all_reps = t_fd > 1e6 ? 1 : reps;
  double all_fd = all_cores(pool, &j, MJD_C, fd_calls, all_reps);
  double all_qv = all_cores(pool, &j, QV, qv_calls, reps);
  printf("model=%s threads=%d one_qv_per_s=%.4g one_fd_per_s=%.4g all_qv_per_s=%.4g "
         "all_fd_per_s=%.4g ratio_all=%.1f\n", spec, T, 1e6 / t_qv, 1e6 / t_fd, all_qv, all_fd,
         all_qv / all_fd);
  fflush(stdout);
  for (int t = 0; t < T; t++) {
    chainfd_deriv_free(j.dv[t]);
    mj_deleteData(j.d[t]);
    for (int k = 0; k < 3; k++) free(j.buf[3 * t + k]);
  }
  free(j.dv); free(j.d); free(j.buf);
  free(a); free(b); free(c);
  mj_deleteData(d);
  chainfd_deriv_free(dv);
  mj_deleteModel(m);
}

int main(int argc, char** argv) {
  int reps = 9, nmodels = 0, threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  const char* models[64];
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--model") && i + 1 < argc && nmodels < 64) models[nmodels++] = argv[++i];
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: chainfd-bench-deriv [--model FILE|chain:...]... [--reps R] [--threads T]\n");
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  if (!nmodels) {
    models[nmodels++] = CHAINFD_SCENES_DIR "/arm7.xml";
    models[nmodels++] = "chain:30,random=1,seed=3,branch=0.3,damping=0.1,armature=0.01,actuators=1";
    models[nmodels++] = "chain:100,random=1,seed=3,damping=0.1,armature=0.01,actuators=1";
  }
  if (threads < 1) threads = 1;
  printf("# one core and %d threads, medians of %d batches; mjd_transitionFD centred, eps 1e-6\n",
         threads, reps);
  cfd_pool* pool = cfd_pool_start(threads);
  if (!pool) {
    fprintf(stderr, "chainfd-bench-deriv: cannot start %d threads\n", threads);
    return 1;
  }
  for (int k = 0; k < nmodels; k++) bench_model(models[k], reps, pool);
  cfd_pool_stop(pool);
  return 0;
}
