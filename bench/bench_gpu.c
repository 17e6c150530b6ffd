// chainfd-bench-gpu: the GPU back ends beside MuJoCo, in one run, on one machine.
//
//   fig2: one chain, n = 8 ... 16384 links: time of one forward dynamics for each GPU back end
//         (states resident on the device), the fast CPU path, and mj_forward on one core
//         ([GPUFD] Fig. 2)
//   fig3: B independent problems, B = 1 ... 65536, for 10 and 200 links: time per batch for each
//         GPU back end and for mj_forward on one core and on all cores (one mjData per thread)
//         ([GPUFD] Fig. 3)
//   arm7: the 7-dof arm at B = 65536: forward dynamics per second, GPU vs MuJoCo on all cores
//   trees: the same for a 30-dof floating tree and a Panda-like arm with its hand (and rollouts of
//         the arm); one ball-joint chain of 40 and 1000 balls (tiled) on one core and on the GPU
//
// Same model and states for everyone: P distinct random MuJoCo states (mj_forward makes them
// current, the adapter turns them into q, qd, tau), repeated to fill a batch. Medians over
// repetitions after warm-up. GPU times: wall time of cfd_gpu_fd on device-resident arrays (the
// latency a caller sees, including the launch and the final synchronisation) and the kernel time
// from CUDA events. Results go to --out DIR as bench_gpu.json.
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "../cli/args.h"  // strict numeric options, shared with the chainfd tool
#include "backend.h"
#include "cfd_math.h"
#include "cfd_median.h"
#include "chain_gen.h"
#include "gpu.h"
#include "chainfd_rollout.h"
#include "chainfd_deriv.h"
#include "abia_variants.h"
#include "deriv_variants.h"
#include "rollout_internal.h"
#include "mj_chain.h"
#include "mj_random.h"
#include "pool.h"

#define NEED(p) cfd_need("chainfd-bench-gpu", (p))

#define POOL 64  // distinct states per model

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

typedef struct {
  mjModel* m;
  mjData* pool[POOL];
  cfd_chain chain;
  double *q, *qd, *tau;  // POOL x n, in link order
  mjData* datas[256];    // one per host thread, for MuJoCo's all-core runs
  int ndatas;
} model_set;

// Chains longer than MuJoCo compiles (4.0: body-tree depth 1023) repeat the links of a 1000-link
// chain (cfd_chain_tile); they have no mjModel, and their states are random in the chain's own
// coordinates.
static int make_tiled_set_of(const char* base_spec, int n, model_set* s) {
  char err[1024];
  memset(s, 0, sizeof(*s));
  mjModel* m = cfd_load_model(base_spec, err, sizeof err);
  cfd_chain base;
  if (!m || cfd_chain_from_model(m, &base, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
  mj_deleteModel(m);
  int st = cfd_chain_tile(&base, n, &s->chain);
  cfd_chain_free(&base);
  if (st) return 1;
  s->q = NEED(malloc(sizeof(double) * POOL * n));
  s->qd = NEED(malloc(sizeof(double) * POOL * n));
  s->tau = NEED(malloc(sizeof(double) * POOL * n));
  cfd_rng r = {42};
  for (int k = 0; k < POOL * n; k++) {
    s->q[k] = cfd_rng_uniform(&r, -3.14, 3.14);
    s->qd[k] = cfd_rng_uniform(&r, -2, 2);
    s->tau[k] = cfd_rng_uniform(&r, -1, 1);
  }
  return 0;
}

static int make_tiled_set(int n, model_set* s) {
  return make_tiled_set_of("chain:1000,random=1,seed=1,armature=0.01", n, s);
}

// (disable: MuJoCo flags to set besides mjDSBL_CONSTRAINT; random qfrc_applied: a flag)
static int make_set_flags(const char* spec, model_set* s, int threads, int disable, int random_qfrc) {
  char err[1024];
  memset(s, 0, sizeof(*s));
  s->m = cfd_load_model(spec, err, sizeof err);
  if (!s->m) { fprintf(stderr, "%s: %s\n", spec, err); return 1; }
  s->m->opt.disableflags |= mjDSBL_CONSTRAINT | disable;
  if (cfd_chain_from_model(s->m, &s->chain, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
  int n = s->chain.n;
  s->q = NEED(malloc(sizeof(double) * POOL * n));
  s->qd = NEED(malloc(sizeof(double) * POOL * n));
  s->tau = NEED(malloc(sizeof(double) * POOL * n));
  double* xw = NEED(malloc(sizeof(double) * 6 * s->m->nbody));
  cfd_rng r = {42};
  for (int k = 0; k < POOL; k++) {
    s->pool[k] = mj_makeData(s->m);
    cfd_random_state(s->m, s->pool[k], &r, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL | CFD_RANDOM_CTRL |
                                             (random_qfrc ? CFD_RANDOM_QFRC : 0));
    mj_forward(s->m, s->pool[k]);
    cfd_state_from_data(s->m, s->pool[k], &s->chain, s->q + k * n, s->qd + k * n, s->tau + k * n, xw);
  }
  free(xw);
  s->ndatas = threads;
  for (int t = 0; t < threads; t++) s->datas[t] = mj_makeData(s->m);
  return 0;
}

static int make_set(const char* spec, model_set* s, int threads) {
  return make_set_flags(spec, s, threads, 0, 0);
}

static void free_set(model_set* s) {
  for (int k = 0; k < POOL; k++) if (s->pool[k]) mj_deleteData(s->pool[k]);
  for (int t = 0; t < s->ndatas; t++) mj_deleteData(s->datas[t]);
  if (s->m) mj_deleteModel(s->m);
  cfd_chain_free(&s->chain);
  free(s->q); free(s->qd); free(s->tau);
}

// ---- MuJoCo: one core, and all cores with one mjData per thread ---------------------------------

// chainfd's fast CPU path over `count` states on `threads` threads
typedef struct {
  const model_set* s;
  int count, first;
} fast_job;

static void* fast_worker(void* arg) {
  fast_job* j = arg;
  int n = j->s->chain.n;
  double* w = NEED(malloc(sizeof(double) * cfd_fast_work_size(n)));
  double* qa = NEED(malloc(sizeof(double) * n));
  cfd_fast_prepare(&j->s->chain, w);  // once per chain, as the solver does
  for (int k = 0; k < j->count; k++) {
    int p = (j->first + k) % POOL;
    cfd_fd_fast_prepared(&j->s->chain, j->s->q + p * n, j->s->qd + p * n, j->s->tau + p * n, NULL, qa, w);
  }
  free(w);
  free(qa);
  return NULL;
}

// median seconds per state of the fast path with `threads` threads busy
static double fast_per_call(const model_set* s, int threads, double budget) {
  pthread_t tid[256];
  fast_job jobs[256];
  int count = threads * 64;
  double reps[5];
  for (int r = 0; r < 5; r++) {
    double t0 = now();
    for (int t = 0; t < threads; t++) {
      jobs[t] = (fast_job){s, count / threads, t * (count / threads)};
      pthread_create(&tid[t], NULL, fast_worker, &jobs[t]);
    }
    for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    reps[r] = (now() - t0) / count;
    if (reps[r] * count > budget) count = count / 2 > threads ? count / 2 : threads;
  }
  return cfd_median(reps, 5);
}

typedef struct {
  const mjModel* m;
  mjData* d;
  const mjData* const* pool;
  int count, first;
} mj_job;

static void* mj_worker(void* arg) {
  mj_job* j = arg;
  for (int k = 0; k < j->count; k++) {
    const mjData* src = j->pool[(j->first + k) % POOL];
    mju_copy(j->d->qpos, src->qpos, j->m->nq);
    mju_copy(j->d->qvel, src->qvel, j->m->nv);
    mju_copy(j->d->ctrl, src->ctrl, j->m->nu);
    mj_forward(j->m, j->d);
  }
  return NULL;
}

// seconds for `count` mj_forward calls spread over `threads` threads (one mjData each)
static double mj_time(model_set* s, int count, int threads) {
  mjData** datas = s->datas;
  pthread_t tid[256];
  mj_job jobs[256];
  double t0 = now();
  int per = (count + threads - 1) / threads;
  for (int t = 0; t < threads; t++) {
    int first = t * per, c = count - first < per ? count - first : per;
    jobs[t] = (mj_job){s->m, datas[t], (const mjData* const*)s->pool, c > 0 ? c : 0, first};
    if (threads == 1) mj_worker(&jobs[t]);
    else pthread_create(&tid[t], NULL, mj_worker, &jobs[t]);
  }
  if (threads > 1)
    for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
  return now() - t0;
}

// median seconds per mj_forward, over enough calls to take ~budget seconds (grown until a run does:
// a short run on many threads would be mostly thread start-up)
static double mj_per_call(model_set* s, int threads, double budget) {
  int count = threads;
  double took = mj_time(s, count, threads);  // warm-up
  while (took < budget && count < 20000000) {
    count = took > 0 ? (int)fmin(count * 8.0, count * 1.2 * budget / took + threads) : count * 8;
    took = mj_time(s, count, threads);
  }
  double reps[5];
  int nrep = took > 0.5 ? 1 : 5;
  reps[0] = took / count;
  for (int r = 1; r < nrep; r++) reps[r] = mj_time(s, count, threads) / count;
  return cfd_median(reps, nrep);
}

// ---- GPU ------------------------------------------------------------------------------------------

typedef struct {
  double wall_us, kernel_us, err;
  int ok;
  double phases[64];  // with tuning.profile: the last launch's phases (us)
  int nphases;
} gpu_meas;

// --cfa-steps: cuda.cfa's refinement steps in every run (0: the library's)
static int cfa_steps;

// times one GPU back end on B states (device-resident), checks qacc against cpu.fast
// under tuning t (NULL: the library's rules)
static gpu_meas gpu_time_tuned(model_set* s, cfd_gpu_algorithm alg, int B, double budget,
                               const cfd_gpu_tuning* t) {
  gpu_meas r = {0};
  int n = s->chain.n;
  char err[1024];
  cfd_gpu* g = NULL;
  cfd_gpu_tuning tune = t ? *t : (cfd_gpu_tuning){0};
  if (!tune.cfa_steps) tune.cfa_steps = cfa_steps;
  if (cfd_gpu_create(&s->chain, 0, alg, &g, err, sizeof err) ||
      cfd_gpu_set_tuning(g, &tune, err, sizeof err)) {
    fprintf(stderr, "%s: %s\n", cfd_gpu_algorithm_name(alg), err);
    cfd_gpu_free(g);
    return r;
  }
  size_t total = (size_t)B * n;
  double* hq = NEED(malloc(sizeof(double) * total));
  double* hqd = NEED(malloc(sizeof(double) * total));
  double* htau = NEED(malloc(sizeof(double) * total));
  double* hqacc = NEED(malloc(sizeof(double) * total));
  for (size_t b = 0; b < (size_t)B; b++) {
    memcpy(hq + b * n, s->q + (b % POOL) * n, sizeof(double) * n);
    memcpy(hqd + b * n, s->qd + (b % POOL) * n, sizeof(double) * n);
    memcpy(htau + b * n, s->tau + (b % POOL) * n, sizeof(double) * n);
  }
  double *dq, *dqd, *dtau, *dqacc;
  if (cudaMalloc((void**)&dq, sizeof(double) * total) || cudaMalloc((void**)&dqd, sizeof(double) * total) ||
      cudaMalloc((void**)&dtau, sizeof(double) * total) || cudaMalloc((void**)&dqacc, sizeof(double) * total)) {
    fprintf(stderr, "%s B=%d: out of device memory for the benchmark arrays\n", cfd_gpu_algorithm_name(alg), B);
    cfd_gpu_free(g);
    free(hq); free(hqd); free(htau); free(hqacc);
    return r;
  }
  cudaMemcpy(dq, hq, sizeof(double) * total, cudaMemcpyHostToDevice);
  cudaMemcpy(dqd, hqd, sizeof(double) * total, cudaMemcpyHostToDevice);
  cudaMemcpy(dtau, htau, sizeof(double) * total, cudaMemcpyHostToDevice);
  if (cfd_gpu_fd(g, B, dq, dqd, dtau, NULL, dqacc, CFD_DEVICE, err, sizeof err)) {
    fprintf(stderr, "%s B=%d: %s\n", cfd_gpu_algorithm_name(alg), B, err);
  } else {
    // correctness of what is timed: against the CPU fast path, on the pool's states
    cudaMemcpy(hqacc, dqacc, sizeof(double) * total, cudaMemcpyDeviceToHost);
    double* ref = NEED(malloc(sizeof(double) * n));
    double* w = NEED(malloc(sizeof(double) * cfd_fast_work_size(n)));
    int check = B < POOL ? B : POOL;
    for (int b = 0; b < check; b++) {
      cfd_fd_fast_cpu(&s->chain, s->q + b * n, s->qd + b * n, s->tau + b * n, NULL, ref, w);
      double num = 0, den = 0;
      for (int i = 0; i < n; i++) {
        num = cfd_worst(num, fabs(hqacc[(size_t)b * n + i] - ref[i]));
        den = cfd_worst(den, fabs(ref[i]));
      }
      r.err = cfd_worst(r.err, num / den);
    }
    free(ref); free(w);
    double walls[64], kernels[64];
    double t0 = now();
    cfd_gpu_fd(g, B, dq, dqd, dtau, NULL, dqacc, CFD_DEVICE, err, sizeof err);
    double one = now() - t0;
    int nrep = 10;  // the wall time from half the repeats, the kernels' from the other half
    int inner = (int)(budget / nrep / (one > 1e-6 ? one : 1e-6));
    if (inner < 1) inner = 1;
    if (inner > 2000) inner = 2000;
    for (int rep = 0; rep < nrep; rep++) {
      double k = 0;
      int timed = rep % 2;  // (timing events cost a call a few us: not in the wall time)
      cfd_gpu_time_kernels(g, timed);
      t0 = now();
      for (int it = 0; it < inner; it++) {
        cfd_gpu_fd(g, B, dq, dqd, dtau, NULL, dqacc, CFD_DEVICE, err, sizeof err);
        k += cfd_gpu_last_kernel_ms(g);
      }
      if (timed) kernels[rep / 2] = k / inner * 1e3;
      else walls[rep / 2] = (now() - t0) / inner * 1e6;
    }
    r.wall_us = cfd_median(walls, nrep / 2);
    r.kernel_us = cfd_median(kernels, nrep / 2);
    r.ok = 1;
    r.nphases = cfd_gpu_phases(g, r.phases, 64);
  }
  cudaFree(dq); cudaFree(dqd); cudaFree(dtau); cudaFree(dqacc);
  cfd_gpu_free(g);
  free(hq); free(hqd); free(htau); free(hqacc);
  return r;
}

static gpu_meas gpu_time(model_set* s, cfd_gpu_algorithm alg, int B, double budget) {
  return gpu_time_tuned(s, alg, B, budget, NULL);
}

static FILE* json;
static int json_first = 1;

static void emit(const char* fig, const char* model, int n, int B, const char* who, double us,
                 double kernel_us, double err) {
  fprintf(json, "%s    {\"fig\": \"%s\", \"model\": \"%s\", \"n\": %d, \"B\": %d, \"backend\": \"%s\", "
          "\"us_per_batch\": %.6g, \"kernel_us\": %.6g, \"fd_per_s\": %.6g, \"max_rel_err\": %.3g}",
          json_first ? "" : ",\n", fig, model, n, B, who, us, kernel_us, us > 0 ? B / (us * 1e-6) : 0,
          err);
  json_first = 0;
  fflush(json);
}

static const cfd_gpu_algorithm algs[5] = {CFD_GPU_ABIA, CFD_GPU_JSIIA, CFD_GPU_CFA, CFD_GPU_ABIA_F32,
                                          CFD_GPU_DCA};

// One chain of n links for the one-chain sections: the generated MuJoCo model up to 1023 links
// (MuJoCo 4.0's depth limit), past that a 1000-link chain's links repeated; spec: its label.
static int one_chain_set(int n, char* spec, size_t size, model_set* s) {
  snprintf(spec, size, "chain:%d,random=1,seed=1,armature=0.01", n);
  if (n <= 1023) return make_set(spec, s, 1);
  snprintf(spec, size, "tile(chain:1000,random=1,seed=1,armature=0.01):%d", n);
  return make_tiled_set(n, s);
}

// One forward dynamics of s's chain on the fast CPU path, one core, in us (prepared once, as the
// solver does; the pool's states in turn for about budget / 4 seconds)
static double fast_one_us(const model_set* s, double budget) {
  int n = s->chain.n;
  double* w = NEED(malloc(sizeof(double) * cfd_fast_work_size(n)));
  double* qa = NEED(malloc(sizeof(double) * n));
  cfd_fast_prepare(&s->chain, w);
  double t0 = now();
  int calls = 0;
  while (now() - t0 < budget / 4 || calls < 3) {
    cfd_fd_fast_prepared(&s->chain, s->q + (calls % POOL) * n, s->qd + (calls % POOL) * n,
                         s->tau + (calls % POOL) * n, NULL, qa, w);
    calls++;
  }
  double us = (now() - t0) / calls * 1e6;
  free(w);
  free(qa);
  return us;
}

static void fig2(int min_n, int max_n, double budget) {
  printf("\n== Fig. 2: one chain, time of one forward dynamics (us), B = 1 ==\n");
  printf("%6s %12s %12s %12s %12s %12s %12s   %s\n", "n", "mj_forward", "cpu.fast", "cuda.abia",
         "cuda.jsiia", "cuda.cfa", "cuda.dca", "best GPU vs mj_forward");
  for (int n = 8; n <= max_n; n *= 2) {
    if (n < min_n) continue;
    char spec[128];
    model_set s;
    if (one_chain_set(n, spec, sizeof spec, &s)) continue;  // (powers of two: 1024 tiled)
    double tmj = 0;  // MuJoCo 4.0 does not compile trees deeper than 1023
    if (s.m) {
      tmj = mj_per_call(&s, 1, budget) * 1e6;
      emit("fig2", spec, n, 1, "mujoco.1core", tmj, 0, 0);
    }
    // the fast CPU path on one core
    double tfast = fast_one_us(&s, budget);
    emit("fig2", spec, n, 1, "cpu.fast", tfast, 0, 0);
    double best = INFINITY, tg[5] = {0, 0, 0, 0, 0};
    for (int a = 0; a < 5; a++) {
      if (algs[a] == CFD_GPU_ABIA_F32) continue;
      if (algs[a] == CFD_GPU_JSIIA && n > 8192) continue;  // M alone is n^2 doubles
      gpu_meas gm = gpu_time(&s, algs[a], 1, budget);
      if (!gm.ok) continue;
      tg[a] = gm.wall_us;
      best = fmin(best, gm.wall_us);
      emit("fig2", spec, n, 1, cfd_gpu_algorithm_name(algs[a]), gm.wall_us, gm.kernel_us, gm.err);
    }
    printf("%6d %12.2f %12.2f %12.2f %12.2f %12.2f %12.2f   x%.1f\n", n, tmj, tfast, tg[0], tg[1],
           tg[2], tg[4], tmj > 0 ? tmj / best : 0);
    fflush(stdout);
    free_set(&s);
  }
}

// CFA on one chain, launch layouts side by side (the kernel-variant record, docs/DESIGN.md 5):
// threads per block x blocks per cluster, with and without iterative refinement, beside
// mj_forward. n = 1023 is the longest chain MuJoCo 4.0 compiles; longer ones are tiled.
static void cfa_layouts(int min_n, int max_n, double budget) {
  static const int layouts[][2] = {{0, 0}, {128, 1}, {128, 4}, {128, 16}, {256, 8}, {256, 16},
                                   {384, 8}, {384, 16}};
  static const int sizes[] = {64, 200, 256, 1023, 1024, 4096, 16384};
  int nlayout = sizeof layouts / sizeof layouts[0];
  printf("\n== CFA, one chain (B = 1): us per forward dynamics by launch layout "
         "(threads x cluster; 0 x 0 = chosen) ==\n");
  for (int k = 0; k < (int)(sizeof sizes / sizeof sizes[0]); k++) {
    int n = sizes[k];
    if (n > max_n) break;
    if (n < min_n) continue;
    char spec[128];
    model_set s;
    if (one_chain_set(n, spec, sizeof spec, &s)) continue;
    double tmj = s.m ? mj_per_call(&s, 1, budget) * 1e6 : 0;
    if (s.m) emit("cfa_layout", spec, n, 1, "mujoco.1core", tmj, 0, 0);
    printf("n = %d (mj_forward %.1f us)\n", n, tmj);
    for (int l = 0; l < nlayout; l++) {
      for (int refine = 1; refine >= 0; refine--) {
        cfd_gpu_tuning t = {.cfa_threads = layouts[l][0], .cfa_cluster = layouts[l][1],
                            .cfa_steps = refine ? 0 : CFD_CFA_NO_REFINE, .profile = l == 0 && refine};
        gpu_meas gm = gpu_time_tuned(&s, CFD_GPU_CFA, 1, budget, &t);
        if (gm.ok && l == 0 && refine) {  // where the time goes, phase by phase (last launch)
          static const char* names[] = {"ID", "blocks", "rhs", "levels", "solve", "qdd"};
          static const char* again[] = {"ID", "rhs", "levels", "solve", "qdd"};
          printf("  phases (us):");
          for (int k = 0; k < gm.nphases; k++)
            printf(" %s%s %.1f", k == 6 ? "| refine: " : "", k < 6 ? names[k] : again[(k - 6) % 5],
                   gm.phases[k]);
          printf("\n");
        }
        if (!gm.ok) continue;
        char who[96];
        snprintf(who, sizeof who, "cuda.cfa[%dx%d%s]", layouts[l][0], layouts[l][1],
                 refine ? "" : ",raw");
        emit("cfa_layout", spec, n, 1, who, gm.wall_us, gm.kernel_us, gm.err);
        printf("  %-26s wall %9.2f us  kernel %9.2f us  err %.1e%s\n", who, gm.wall_us,
               gm.kernel_us, gm.err, tmj > 0 && refine && !l ? "" : "");
        if (tmj > 0 && refine && l == 0) printf("  %-26s x%.0f mj_forward\n", "", tmj / gm.wall_us);
      }
    }
    fflush(stdout);
    free_set(&s);
  }
}

// cuda.dca (dca.cu) on one chain by links per subsystem (0: the rule), the phases of the rule's
// launch (the critical path: velocities, handle equations, assembly, boundary conditions,
// accelerations), beside cuda.abia (its rule), cpu.dca and cpu.fast on one core, and mj_forward
static void dca_lengths(int min_n, int max_n, double budget) {
  static const int sizes[] = {64, 256, 1023, 1024, 4096, 16384};
  static const int lengths[] = {0, 1, 2, 4, 8, 16, 32, 64};
  printf("\n== DCAe (cuda.dca), one chain: us per call by links per subsystem ==\n");
  for (int k = 0; k < (int)(sizeof sizes / sizeof sizes[0]); k++) {
    int n = sizes[k];
    if (n > max_n) break;
    if (n < min_n) continue;
    char spec[128];
    model_set s;
    if (one_chain_set(n, spec, sizeof spec, &s)) continue;
    double tmj = s.m ? mj_per_call(&s, 1, budget) * 1e6 : 0;
    if (s.m) emit("dca", spec, n, 1, "mujoco.1core", tmj, 0, 0);
    double tfast = fast_one_us(&s, budget);
    emit("dca", spec, n, 1, "cpu.fast", tfast, 0, 0);
    double* w = NEED(malloc(sizeof(double) * cfd_dca_work_size(n)));
    double* qa = NEED(malloc(sizeof(double) * n));
    double t0 = now();
    int calls = 0;
    while (now() - t0 < budget / 4 || calls < 3) {
      cfd_fd_dca_cpu(&s.chain, s.q + (calls % POOL) * n, s.qd + (calls % POOL) * n,
                     s.tau + (calls % POOL) * n, NULL, qa, w);
      calls++;
    }
    double tcpu = (now() - t0) / calls * 1e6;
    emit("dca", spec, n, 1, "cpu.dca", tcpu, 0, 0);
    free(w);
    free(qa);
    gpu_meas ga = gpu_time(&s, CFD_GPU_ABIA, 1, budget);
    if (ga.ok) emit("dca", spec, n, 1, "cuda.abia", ga.wall_us, ga.kernel_us, ga.err);
    // the sequential ABA in one thread (abia_kernel): the operation count's baseline under ncu
    cfd_gpu_tuning th = {.abia_kernel = CFD_ABIA_THREAD};
    gpu_meas gt = gpu_time_tuned(&s, CFD_GPU_ABIA, 1, budget, &th);
    if (gt.ok) emit("dca", spec, n, 1, "cuda.abia[thread]", gt.wall_us, gt.kernel_us, gt.err);
    printf("n = %d: mj_forward %.1f us, cpu.fast %.1f us, cpu.dca %.1f us, cuda.abia %.1f us "
           "(one thread: %.1f us)\n", n, tmj, tfast, tcpu, ga.ok ? ga.wall_us : 0, gt.ok ? gt.wall_us : 0);
    for (int l = 0; l < (int)(sizeof lengths / sizeof lengths[0]); l++) {
      cfd_gpu_tuning t = {.dca_links = lengths[l], .profile = lengths[l] == 0};
      gpu_meas gm = gpu_time_tuned(&s, CFD_GPU_DCA, 1, budget, &t);
      if (!gm.ok) continue;
      char who[64];
      snprintf(who, sizeof who, "cuda.dca[%d]", lengths[l]);
      emit("dca", spec, n, 1, who, gm.wall_us, gm.kernel_us, gm.err);
      printf("  %-16s wall %9.2f us  kernel %9.2f us  err %.1e", who, gm.wall_us, gm.kernel_us, gm.err);
      if (gm.nphases >= 5)
        printf("  phases: velocities %.1f, handles %.1f, assembly %.1f, down %.1f, accelerations %.1f",
               gm.phases[0], gm.phases[1], gm.phases[2], gm.phases[3], gm.phases[4]);
      printf("\n");
    }
    fflush(stdout);
    free_set(&s);
  }
}

// ABIA's scan kernel (abia_scan.cu) on one chain and a few, by links per block, beside the kernel
// the default choice takes, cuda.cfa and mj_forward: the record behind the scan's default block
// length and the lengths from which the choice takes it.
static void abia_scan_lengths(int min_n, int max_n, double budget) {
  static const int sizes[] = {64, 128, 200, 256, 512, 1023, 2048, 4096, 8192, 16384};
  static const int lengths[] = {0, 2, 4, 8, 16, 32, 64};
  printf("\n== ABIA scan kernel, one chain and a few: us per call by links per block ==\n");
  for (int k = 0; k < (int)(sizeof sizes / sizeof sizes[0]); k++) {
    int n = sizes[k];
    if (n > max_n) break;
    if (n < min_n) continue;
    char spec[128];
    model_set s;
    if (one_chain_set(n, spec, sizeof spec, &s)) continue;
    double tmj = s.m ? mj_per_call(&s, 1, budget) * 1e6 : 0;
    if (s.m) emit("abia_scan", spec, n, 1, "mujoco.1core", tmj, 0, 0);
    printf("n = %d (mj_forward %.1f us)\n", n, tmj);
    for (int B = 1; B <= 512; B *= 8) {
      for (int l = -5; l < (int)(sizeof lengths / sizeof lengths[0]); l++) {
        char who[96];
        gpu_meas gm;
        if (l <= -4) {  // 32 groups of lanes per thread block instead of 16: the default length, 2
          cfd_gpu_tuning t = {.abia_kernel = CFD_ABIA_SCAN, .scan_groups = 32,
                              .scan_links = l == -5 ? 2 : 0, .profile = B == 1};
          gm = gpu_time_tuned(&s, CFD_GPU_ABIA, B, budget, &t);
          snprintf(who, sizeof who, "cuda.abia[scan,%d,32/block]", l == -5 ? 2 : 0);
          if (gm.ok && B == 1) {
            printf("  %-28s phases (us):", who);
            for (int k = 0; k < gm.nphases && k < 7; k++) printf(" %.1f", gm.phases[k]);
            printf("\n");
          }
        } else if (l == -3) {  // the kernel chosen before the scan's (lanes in link frames), past 256 links
          if (n <= 256) continue;
          cfd_gpu_tuning t = {.abia_kernel = CFD_ABIA_LANES};
          gm = gpu_time_tuned(&s, CFD_GPU_ABIA, B, budget, &t);
          snprintf(who, sizeof who, "cuda.abia[lanes]");
        } else if (l == -2) {  // what cuda.abia chooses, and CFA
          gm = gpu_time(&s, CFD_GPU_ABIA, B, budget);
          snprintf(who, sizeof who, "cuda.abia");
        } else if (l == -1) {
          if (n > 4096) continue;
          gm = gpu_time(&s, CFD_GPU_CFA, B, budget);
          snprintf(who, sizeof who, "cuda.cfa");
        } else {
          if (lengths[l] && lengths[l] * 256 < n) continue;  // raised to n / 256 anyway
          cfd_gpu_tuning t = {.abia_kernel = CFD_ABIA_SCAN, .scan_links = lengths[l],
                              .profile = B == 1};
          gm = gpu_time_tuned(&s, CFD_GPU_ABIA, B, budget, &t);
          snprintf(who, sizeof who, "cuda.abia[scan,%d]", lengths[l]);
          if (gm.ok && B == 1) {  // where the time goes, phase by phase (the last launch)
            static const char* names[] = {"maps", "v+P scans", "inertias", "bias scan", "bias",
                                          "acc scan", "acc"};
            printf("  %-28s phases (us):", who);
            for (int k = 0; k < gm.nphases && k < 7; k++) printf(" %s %.1f", names[k], gm.phases[k]);
            printf("\n");
          }
        }
        if (!gm.ok) continue;
        emit("abia_scan", spec, n, B, who, gm.wall_us, gm.kernel_us, gm.err);
        printf("  B=%-3d %-22s wall %9.2f us  kernel %9.2f us  err %.1e", B, who, gm.wall_us,
               gm.kernel_us, gm.err);
        if (tmj > 0 && B == 1) printf("  x%.0f mj_forward", tmj / gm.wall_us);
        printf("\n");
      }
    }
    fflush(stdout);
    free_set(&s);
  }
}

// ABIA's batch kernels side by side on the 7-dof arm and a 16-link chain (the variant record, docs/DESIGN.md 5)
static void abia_variants(const char* arm, double budget) {
  // (kernel variant, lanes exchange through shared memory, name)
  static const struct { int v, xch; const char* name; } kinds[] = {
      {1, 1, "global lean"}, {2, 1, "local lean"}, {3, 1, "local full"}, {4, 1, "lanes"},
      {4, 0, "lanes shuffles"}, {5, 1, "world local"}, {6, 1, "world global"},
      {7, 1, "world lanes"}, {8, 1, "world blocks"}, {9, 1, "world warps"}, {10, 1, "scan"}};
  const char* specs[3] = {arm, "chain:16,random=1,seed=1,armature=0.01",
                          "chain:200,random=1,seed=1,armature=0.01"};
  printf("\n== ABIA batch kernels: forward dynamics per second ==\n");
  for (int k = 0; k < 3; k++) {
    model_set s;
    if (make_set(specs[k], &s, 1)) continue;
    int n = s.chain.n;
    for (int B = n > 16 ? 1 : 1024; B <= 65536; B *= 4)
      for (size_t v = 0; v < sizeof(kinds) / sizeof(kinds[0]); v++) {
        if (n > 16 && (kinds[v].v == 2 || kinds[v].v == 3)) continue;  // local: short chains only
        if (n > 32 && (kinds[v].v == 5 || kinds[v].v == 7)) continue;
        if (kinds[v].v == 10 && B > 1024) continue;  // a cluster per instance: few only
        // the library's kernels forced by number, the dropped ones from bench/variants
        cfd_gpu_tuning t = {.abia_kernel = kinds[v].v, .lanes_shuffle = !kinds[v].xch,
                            .abia_launch = cfd_variant_abia(kinds[v].v, n)};
        if ((kinds[v].v == 2 || kinds[v].v == 3 || kinds[v].v == 6) && !t.abia_launch) continue;
        gpu_meas gm = gpu_time_tuned(&s, CFD_GPU_ABIA, B, budget, &t);
        if (!gm.ok) continue;
        char who[64];
        snprintf(who, sizeof who, "cuda.abia[%s]", kinds[v].name);
        emit("abia_variants", specs[k], s.chain.n, B, who, gm.wall_us, gm.kernel_us, gm.err);
        printf("  n=%2d B=%6d %-24s %9.1f us  %.3g FD/s  err %.1e\n", s.chain.n, B, who,
               gm.wall_us, B / (gm.wall_us * 1e-6), gm.err);
      }
    free_set(&s);
  }
}

static void fig3(const char* fig, const char* spec, const char* label, int minB, int maxB,
                 double budget, int cores) {
  model_set s;
  if (make_set(spec, &s, cores)) return;
  int n = s.chain.n;
  printf("\n== Fig. 3: %s (n = %d), B independent problems: time per batch (us) ==\n", label, n);
  printf("%7s %13s %13s %12s %12s %12s %12s %14s   %s\n", "B", "mj 1 core", "mj all cores",
         "cuda.abia", "cuda.jsiia", "cuda.cfa", "cuda.dca", "abia.f32(err)",
         "best double GPU vs mj all cores");
  // MuJoCo's per-state cost on one core, and with every core busy (one mjData per thread);
  // a batch of B costs B times that (one state's latency when B is below the core count)
  double t1 = mj_per_call(&s, 1, budget) * 1e6;
  double tall = mj_per_call(&s, cores, budget) * 1e6;
  double f1 = fast_per_call(&s, 1, budget) * 1e6, fall = fast_per_call(&s, cores, budget) * 1e6;
  for (int B = minB; B <= maxB; B *= 4) {
    double mj1 = t1 * B, mjall = B < cores ? t1 : tall * B;
    emit(fig, spec, n, B, "mujoco.1core", mj1, 0, 0);
    emit(fig, spec, n, B, "mujoco.allcores", mjall, 0, 0);
    emit(fig, spec, n, B, "cpu.fast", f1 * B, 0, 0);
    emit(fig, spec, n, B, "cpu.fast.allcores", B < cores ? f1 : fall * B, 0, 0);
    double best = INFINITY, tg[5] = {0, 0, 0, 0, 0}, f32err = 0;
    for (int a = 0; a < 5; a++) {
      gpu_meas gm = gpu_time(&s, algs[a], B, budget);
      if (!gm.ok) continue;
      tg[a] = gm.wall_us;
      if (algs[a] == CFD_GPU_ABIA_F32) f32err = gm.err;
      else best = fmin(best, gm.wall_us);
      emit(fig, spec, n, B, cfd_gpu_algorithm_name(algs[a]), gm.wall_us, gm.kernel_us, gm.err);
      if (!(gm.err <= 1e-8) && algs[a] != CFD_GPU_ABIA_F32) printf("  (%s: max_rel_err %.2e against cpu.fast)\n", cfd_gpu_algorithm_name(algs[a]), gm.err);
    }
    printf("%7d %13.1f %13.1f %12.1f %12.1f %12.1f %12.1f %6.1f(%6.0e)   x%.1f  (best: %.3g FD/s)\n",
           B, mj1, mjall, tg[0], tg[1], tg[2], tg[4], tg[3], f32err, mjall / best, B / (best * 1e-6));
    fflush(stdout);
  }
  free_set(&s);
}

// A batch's starts (B x nx) and controls (B x H x nu) copied to new device arrays, and a device
// array for its states (B x (H + 1) x nx, or B x nx with final_only). Returns the first CUDA error
// (the pointers are then NULL or to be freed as they are).
static cudaError_t upload_batch(int B, int H, int nx, int nu, int final_only, const double* init,
                                const double* ctrl, double** dinit, double** dctrl, double** dout) {
  *dinit = *dctrl = *dout = NULL;
  cudaError_t e = cudaMalloc((void**)dinit, sizeof(double) * (size_t)B * nx);
  if (!e) e = cudaMalloc((void**)dctrl, sizeof(double) * (size_t)B * H * (nu ? nu : 1));
  if (!e) e = cudaMalloc((void**)dout, sizeof(double) * (size_t)B * (final_only ? 1 : H + 1) * nx);
  if (!e) e = cudaMemcpy(*dinit, init, sizeof(double) * (size_t)B * nx, cudaMemcpyHostToDevice);
  if (!e) e = cudaMemcpy(*dctrl, ctrl, sizeof(double) * (size_t)B * H * nu, cudaMemcpyHostToDevice);
  return e;
}

// Median wall time (us) of a rollout of B x H steps from device arrays under tuning t (NULL: the
// library's), after one untimed run; 0 when a run fails (the reason on stderr)
static double rollout_resident_us(chainfd_rollout* r, int B, int H, int final_only, const double* dinit,
                                  const double* dctrl, double* dout, const cfd_gpu_tuning* t) {
  char err[512];
  double reps[7];
  int ok = !cfd_rollout_set_tuning(r, t, err, sizeof err) &&
           !chainfd_rollout_run(r, B, H, dinit, 0, dctrl, dout, final_only, CHAINFD_DEVICE, err, sizeof err);
  for (int k = 0; ok && k < 7; k++) {
    double a = now();
    ok = !chainfd_rollout_run(r, B, H, dinit, 0, dctrl, dout, final_only, CHAINFD_DEVICE, err, sizeof err);
    reps[k] = now() - a;
  }
  if (!ok) fprintf(stderr, "rollout B=%d H=%d: %s\n", B, H, err);
  cfd_rollout_set_tuning(r, NULL, err, sizeof err);
  return ok ? cfd_median(reps, 7) * 1e6 : 0;
}

// ---- derivatives: d qacc / d(q, qvel) (and d ctrl) of B states, GPU from device arrays against
// one CPU core (chainfd's own CPU path, and mjd_transitionFD for scale) -------------------------------
static void derivatives(const char* spec, int maxB) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  if (!m) { fprintf(stderr, "%s: %s\n", spec, err); return; }
  chainfd_deriv *cpu, *gpu;
  if (chainfd_deriv_create(m, CHAINFD_CPU, &cpu, err, sizeof err) ||
      chainfd_deriv_create(m, 0, &gpu, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  int n = m->nv, nu = m->nu;
  chainfd_rollout* vr = NULL;  // the dropped thread-per-instance kernel's model (bench/variants)
  if (n <= 16 && nu <= 16 && chainfd_rollout_create(m, 0, &vr, err, sizeof err)) vr = NULL;
  printf("\n== derivatives d qacc/d(q, qvel) of B states: %s (n = %d), double, medians of 7 ==\n", spec, n);
  printf("%7s %12s %14s %14s %14s %16s\n", "B", "GPU us", "GPU grad/s", "+ d ctrl us", "CPU 1 core us",
         "thread kernel us");
  mjData* d = mj_makeData(m);
  cfd_rng rng = {5};
  for (int B = 16; B <= maxB; B *= 4) {
    double* x = NEED(malloc(sizeof(double) * (size_t)B * 2 * n));
    double* u = NEED(malloc(sizeof(double) * (size_t)B * (nu ? nu : 1)));
    for (int b = 0; b < B; b++) {
      mj_resetData(m, d);
      cfd_random_state(m, d, &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL | CFD_RANDOM_CTRL);
      for (int i = 0; i < m->nq; i++) d->qpos[i] *= 0.3;
      chainfd_rollout_get_state(m, d, x + (size_t)b * 2 * n);
      for (int a = 0; a < nu; a++) u[(size_t)b * nu + a] = d->ctrl[a];
    }
    double *dx, *du, *dq, *dv, *dctl;
    size_t nn = (size_t)B * n * n;
    cudaMalloc((void**)&dx, sizeof(double) * (size_t)B * 2 * n);
    cudaMalloc((void**)&du, sizeof(double) * (size_t)B * (nu ? nu : 1));
    cudaMalloc((void**)&dq, sizeof(double) * nn);
    cudaMalloc((void**)&dv, sizeof(double) * nn);
    cudaMalloc((void**)&dctl, sizeof(double) * (size_t)B * n * (nu ? nu : 1));
    cudaMemcpy(dx, x, sizeof(double) * (size_t)B * 2 * n, cudaMemcpyHostToDevice);
    cudaMemcpy(du, u, sizeof(double) * (size_t)B * nu, cudaMemcpyHostToDevice);
    double t[4] = {0, 0, 0, 0}, reps[7];
    for (int what = 0; what < 4; what++) {
      if (what == 3 && !vr) break;
      double* hq = what == 2 ? NEED(malloc(sizeof(double) * nn)) : NULL;
      double* hv = what == 2 ? NEED(malloc(sizeof(double) * nn)) : NULL;
      int R = what == 2 ? (B > 4096 ? 1 : 7) : 7;
      for (int r = -1; r < R; r++) {
        double a = now();
        int st = what == 3 ? cfd_variant_deriv_thread(cfd_rollout_gpu(vr), B, dx, du, dq, dv, NULL, err, sizeof err)
               : what == 2 ? chainfd_deriv_batch(cpu, B, x, u, hq, hv, NULL, CHAINFD_HOST, err, sizeof err)
               : chainfd_deriv_batch(gpu, B, dx, du, dq, dv, what ? dctl : NULL, CHAINFD_DEVICE, err, sizeof err);
        if (st) { fprintf(stderr, "%s\n", err); break; }
        if (r >= 0) reps[r] = now() - a;
      }
      t[what] = cfd_median(reps, R) * 1e6;
      free(hq); free(hv);
    }
    if (vr) printf("%7d %12.1f %14.3g %14.1f %14.1f %16.1f\n", B, t[0], B / (t[0] * 1e-6), t[1], t[2], t[3]);
    else printf("%7d %12.1f %14.3g %14.1f %14.1f %16s\n", B, t[0], B / (t[0] * 1e-6), t[1], t[2], "(n > 16)");
    if (vr) emit("deriv", spec, n, B, "cuda.deriv.thread(variant)", t[3], 0, 0);
    emit("deriv", spec, n, B, "cuda.deriv.qv", t[0], 0, 0);
    emit("deriv", spec, n, B, "cuda.deriv.qvu", t[1], 0, 0);
    emit("deriv", spec, n, B, "cpu.deriv.qv.1core", t[2], 0, 0);
    fflush(stdout);
    cudaFree(dx); cudaFree(du); cudaFree(dq); cudaFree(dv); cudaFree(dctl);
    free(x); free(u);
  }
  mj_deleteData(d);
  chainfd_rollout_free(vr);
  chainfd_deriv_free(cpu);
  chainfd_deriv_free(gpu);
  mj_deleteModel(m);
}

// ---- paper 003's experiment: the end-to-end latency of N derivative evaluations from host arrays,
// the GPU (copies both ways included) against the CPU on one core and on every core ------------
typedef struct {
  chainfd_deriv** dv;  // a CPU context per thread
  int N, n;
  const double *x, *u;
  double *Dq, *Dv;
  int nu, failed;
} lat_job;

static void lat_worker(void* arg, int t, int T) {
  lat_job* j = arg;
  int lo = (int)((long)j->N * t / T), hi = (int)((long)j->N * (t + 1) / T);
  if (hi <= lo) return;
  char err[256];
  size_t nn = (size_t)j->n * j->n;
  if (chainfd_deriv_batch(j->dv[t], hi - lo, j->x + (size_t)lo * 2 * j->n, j->u ? j->u + (size_t)lo * j->nu : NULL,
                          j->Dq + lo * nn, j->Dv + lo * nn, NULL, CHAINFD_HOST, err, sizeof err))
    j->failed = 1;
}

static void deriv_latency(const char* spec, int maxN) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  if (!m) { fprintf(stderr, "%s: %s\n", spec, err); return; }
  int n = m->nv, nu = m->nu, cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  chainfd_deriv* gpu;
  if (chainfd_deriv_create(m, 0, &gpu, err, sizeof err)) { fprintf(stderr, "%s\n", err); return; }
  cfd_pool* pool = NEED(cfd_pool_start(cores));
  lat_job j = {calloc(cores, sizeof(chainfd_deriv*)), 0, n, NULL, NULL, NULL, NULL, nu, 0};
  for (int t = 0; t < cores; t++)
    if (chainfd_deriv_create(m, CHAINFD_CPU, &j.dv[t], err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(1); }
  printf("\n== paper 003's experiment: N evaluations of d qacc/d(q, qvel), end to end from host arrays: "
         "%s (n = %d), double, medians of 21 ==\n", spec, n);
  printf("%6s %14s %14s %16s %8s\n", "N", "GPU e2e us", "CPU 1 core us", "CPU cores us", "faster");
  mjData* d = mj_makeData(m);
  cfd_rng rng = {11};
  for (int N = 16; N <= maxN; N *= 2) {
    double* x = NEED(malloc(sizeof(double) * (size_t)N * 2 * n));
    double* u = NEED(malloc(sizeof(double) * (size_t)N * (nu ? nu : 1)));
    double* Dq = NEED(malloc(sizeof(double) * (size_t)N * n * n));
    double* Dv = NEED(malloc(sizeof(double) * (size_t)N * n * n));
    for (int b = 0; b < N; b++) {
      mj_resetData(m, d);
      cfd_random_state(m, d, &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL | CFD_RANDOM_CTRL);
      for (int i = 0; i < m->nq; i++) d->qpos[i] *= 0.3;
      chainfd_rollout_get_state(m, d, x + (size_t)b * 2 * n);
      for (int a = 0; a < nu; a++) u[(size_t)b * nu + a] = d->ctrl[a];
    }
    j.N = N, j.x = x, j.u = u, j.Dq = Dq, j.Dv = Dv;
    double t[3], reps[21];
    for (int what = 0; what < 3; what++) {
      for (int r = -2; r < 21; r++) {
        double a = now();
        if (what == 0) {
          if (chainfd_deriv_batch(gpu, N, x, u, Dq, Dv, NULL, CHAINFD_HOST, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            exit(1);
          }
        } else if (what == 1) {
          lat_worker(&j, 0, 1);
        } else {
          cfd_pool_run(pool, lat_worker, &j);
        }
        if (r >= 0) reps[r] = now() - a;
      }
      t[what] = cfd_median(reps, 21) * 1e6;
    }
    if (j.failed) { fprintf(stderr, "deriv_latency: a CPU batch failed\n"); exit(1); }
    printf("%6d %14.1f %14.1f %16.1f %8s\n", N, t[0], t[1], t[2], t[0] < t[2] ? "GPU" : "CPU");
    emit("deriv_latency", spec, n, N, "cuda.deriv.e2e", t[0], 0, 0);
    emit("deriv_latency", spec, n, N, "cpu.deriv.1core", t[1], 0, 0);
    emit("deriv_latency", spec, n, N, "cpu.deriv.allcores", t[2], 0, 0);
    fflush(stdout);
    free(x); free(u); free(Dq); free(Dv);
  }
  printf("(CPU cores: %d threads, a persistent pool; each thread's share of N through its own context)\n", cores);
  for (int t = 0; t < cores; t++) chainfd_deriv_free(j.dv[t]);
  free(j.dv);
  cfd_pool_stop(pool);
  mj_deleteData(d);
  chainfd_deriv_free(gpu);
  mj_deleteModel(m);
}

// ---- one long chain: d qacc / d(q, qvel), two dense n x n blocks, on the GPU from device arrays,
// against chainfd's CPU path on one core and mjd_transitionFD on every core (a call a thread, each
// its own state, at once; forward differences, MuJoCo's cheaper option) --------------------------
typedef struct {
  const mjModel* m;
  mjData** d;
  double** A;
} fd_job;

static void fd_worker(void* arg, int t, int T) {
  (void)T;
  fd_job* j = arg;
  mjd_transitionFD(j->m, j->d[t], 1e-6, 0, j->A[t], NULL, NULL, NULL);
}

static void deriv_long(const char* spec) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  if (!m) { fprintf(stderr, "%s: %s\n", spec, err); return; }
  chainfd_deriv *cpu, *gpu;
  if (chainfd_deriv_create(m, CHAINFD_CPU, &cpu, err, sizeof err) ||
      chainfd_deriv_create(m, 0, &gpu, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  int n = m->nv, nu = m->nu, cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  size_t nn = (size_t)n * n;
  mjData* d = mj_makeData(m);
  cfd_rng rng = {13};
  cfd_random_state(m, d, &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL | CFD_RANDOM_CTRL);
  mj_forward(m, d);
  double* x = NEED(malloc(sizeof(double) * 2 * n));
  double* u = NEED(malloc(sizeof(double) * (nu ? nu : 1)));
  chainfd_rollout_get_state(m, d, x);
  for (int a = 0; a < nu; a++) u[a] = d->ctrl[a];
  double *dx, *du, *dq, *dv;
  cudaMalloc((void**)&dx, sizeof(double) * 2 * n);
  cudaMalloc((void**)&du, sizeof(double) * (nu ? nu : 1));
  cudaMalloc((void**)&dq, sizeof(double) * nn);
  cudaMalloc((void**)&dv, sizeof(double) * nn);
  cudaMemcpy(dx, x, sizeof(double) * 2 * n, cudaMemcpyHostToDevice);
  cudaMemcpy(du, u, sizeof(double) * (nu ? nu : 1), cudaMemcpyHostToDevice);
  double reps[9];
  for (int r = -1; r < 9; r++) {
    double a = now();
    if (chainfd_deriv_batch(gpu, 1, dx, nu ? du : NULL, dq, dv, NULL, CHAINFD_DEVICE, err, sizeof err)) {
      fprintf(stderr, "%s\n", err);
      exit(1);
    }
    if (r >= 0) reps[r] = now() - a;
  }
  double t_gpu = cfd_median(reps, 9) * 1e6;
  double* hq = NEED(malloc(sizeof(double) * nn));
  double* hv = NEED(malloc(sizeof(double) * nn));
  double a = now();
  if (chainfd_deriv_qacc(cpu, m, d, NULL, hq, hv, NULL, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(1); }
  double t_cpu = (now() - a) * 1e6;
  // GPU against CPU, each block relative to its largest entry
  double* g = NEED(malloc(sizeof(double) * nn));
  double worst = 0;
  for (int k = 0; k < 2; k++) {
    cudaMemcpy(g, k ? dv : dq, sizeof(double) * nn, cudaMemcpyDeviceToHost);
    const double* w = k ? hv : hq;
    double e = 0, sc = 0;
    for (size_t i = 0; i < nn; i++) e = fmax(e, fabs(g[i] - w[i])), sc = fmax(sc, fabs(w[i]));
    worst = fmax(worst, e / sc);
  }
  fd_job j = {m, calloc(cores, sizeof(mjData*)), calloc(cores, sizeof(double*))};
  for (int t = 0; t < cores; t++) {
    j.d[t] = mj_copyData(NULL, m, d);
    for (int i = 0; i < m->nv; i++) j.d[t]->qvel[i] += 1e-3 * t;  // (each its own state)
    j.A[t] = NEED(malloc(sizeof(double) * 4 * nn));
  }
  cfd_pool* pool = NEED(cfd_pool_start(cores));
  a = now();
  cfd_pool_run(pool, fd_worker, &j);
  double t_fd = (now() - a) * 1e6;
  cfd_pool_stop(pool);
  printf("\n== one long chain: d qacc/d(q, qvel) (two %d x %d blocks), double: %s ==\n", n, n, spec);
  printf("model=%s n=%d gpu_us=%.1f cpu_1core_us=%.1f mjd_fd_%dcores_us=%.4g (%d calls at once, forward "
         "differences) mjd_us_per_gradient=%.4g ratio_gpu=%.1f ratio_cpu1=%.1f gpu_vs_cpu=%.2e\n",
         spec, n, t_gpu, t_cpu, cores, t_fd, cores, t_fd / cores, t_fd / cores / t_gpu,
         t_fd / cores / t_cpu, worst);
  emit("deriv_long", spec, n, 1, "cuda.deriv.long", t_gpu, 0, worst);
  emit("deriv_long", spec, n, 1, "cpu.deriv.1core", t_cpu, 0, 0);
  emit("deriv_long", spec, n, cores, "mujoco.mjd_transitionFD.forward.allcores", t_fd, 0, 0);
  fflush(stdout);
  for (int t = 0; t < cores; t++) mj_deleteData(j.d[t]), free(j.A[t]);
  free(j.d); free(j.A); free(g); free(hq); free(hv); free(x); free(u);
  cudaFree(dx); cudaFree(du); cudaFree(dq); cudaFree(dv);
  mj_deleteData(d);
  chainfd_deriv_free(cpu);
  chainfd_deriv_free(gpu);
  mj_deleteModel(m);
}

// ---- rollouts: env-steps per second, GPU against MuJoCo's mj_step on all cores -------------------

typedef struct {
  const mjModel* m;
  mjData* d;
  const double* init;
  const double* ctrl;
  int first, count, H, nx;
} step_job;

static void* step_worker(void* arg) {
  step_job* j = arg;
  for (int b = j->first; b < j->first + j->count; b++) {
    chainfd_rollout_set_state(j->m, j->d, j->init + (size_t)(b % POOL) * j->nx);
    for (int t = 0; t < j->H; t++) {
      mju_copy(j->d->ctrl, j->ctrl + ((size_t)(b % POOL) * j->H + t) * j->m->nu, j->m->nu);
      mj_step(j->m, j->d);
    }
  }
  return NULL;
}

static void rollouts(const char* spec, const char* label, int maxB, int cores, double budget) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  if (!m) { fprintf(stderr, "%s: %s\n", spec, err); return; }
  int n = m->nv, nu = m->nu, nx = 2 * n;
  chainfd_rollout* r;
  if (chainfd_rollout_create(m, 0, &r, err, sizeof err)) { fprintf(stderr, "%s\n", err); mj_deleteModel(m); return; }
  printf("\n== rollouts: %s (n = %d, nu = %d), env-steps per second ==\n", label, n, nu);
  printf("%7s %5s %14s %14s %14s %14s %10s %14s %10s %10s\n", "B", "H", "MuJoCo all", "GPU resident",
         "1 thread/inst", "lanes link-fr", "e2e ms",
         "pinned e2e", "pinned ms", "vs MuJoCo");
  mjData* datas[256];
  for (int t = 0; t < cores; t++) datas[t] = mj_makeData(m);
  int Hs[3] = {32, 64, 128};
  for (int hi = 0; hi < 3; hi++) {
    int H = Hs[hi];
    // the inputs: POOL random starts and control sequences, repeated across the batch
    double* pool_init = NEED(malloc(sizeof(double) * POOL * nx));
    double* pool_ctrl = NEED(malloc(sizeof(double) * POOL * H * (nu ? nu : 1)));
    cfd_rng rng = {7};
    for (int k = 0; k < POOL; k++) {
      mj_resetData(m, datas[0]);
      cfd_random_state(m, datas[0], &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL);
      chainfd_rollout_get_state(m, datas[0], pool_init + (size_t)k * nx);
    }
    for (size_t k = 0; k < (size_t)POOL * H * nu; k++) pool_ctrl[k] = cfd_rng_uniform(&rng, -1, 1);
    // MuJoCo on all cores: per env-step cost with every core busy, over at least `budget` seconds
    // (a short run would be mostly thread start-up); the median of three such runs, since the
    // host's all-core speed varies from run to run
    int mjB = cores * 4;
    double mj_rates[3] = {0, 0, 0};
    int got = 0;
    for (int tries = 0; tries < 16 && got < 3; tries++) {
      pthread_t tid[256];
      step_job jobs[256];
      double t0 = now();
      for (int t = 0; t < cores; t++) {
        jobs[t] = (step_job){m, datas[t], pool_init, pool_ctrl, t * (mjB / cores), mjB / cores, H, nx};
        pthread_create(&tid[t], NULL, step_worker, &jobs[t]);
      }
      for (int t = 0; t < cores; t++) pthread_join(tid[t], NULL);
      double took = now() - t0;
      if (took >= budget) mj_rates[got++] = (double)mjB * H / took;
      else mjB *= 2;
    }
    double mj_rate = got ? cfd_median(mj_rates, got) : 0;  // the runs that reached the budget
    for (int B = 1; B <= maxB; B *= 4) {
      double* init = NEED(malloc(sizeof(double) * (size_t)B * nx));
      double* ctrl = NEED(malloc(sizeof(double) * (size_t)B * H * (nu ? nu : 1)));
      double* out = NEED(malloc(sizeof(double) * (size_t)B * (H + 1) * nx));
      for (int b = 0; b < B; b++) {
        memcpy(init + (size_t)b * nx, pool_init + (size_t)(b % POOL) * nx, sizeof(double) * nx);
        memcpy(ctrl + (size_t)b * H * nu, pool_ctrl + (size_t)(b % POOL) * H * nu, sizeof(double) * H * nu);
      }
      double *dinit, *dctrl, *dout;
      upload_batch(B, H, nx, nu, 0, init, ctrl, &dinit, &dctrl, &dout);
      double res[7], e2e[7], pin[7], one[7], other[7] = {0};
      // end to end from page-locked host memory too (chainfd_host_alloc)
      double* pinit = NEED(chainfd_host_alloc(sizeof(double) * (size_t)B * nx));
      double* pctrl = NEED(chainfd_host_alloc(sizeof(double) * (size_t)B * H * (nu ? nu : 1)));
      double* pout = NEED(chainfd_host_alloc(sizeof(double) * (size_t)B * (H + 1) * nx));
      memcpy(pinit, init, sizeof(double) * (size_t)B * nx);
      memcpy(pctrl, ctrl, sizeof(double) * (size_t)B * H * nu);
      int ok = !chainfd_rollout_run(r, B, H, dinit, 0, dctrl, dout, 0, CHAINFD_DEVICE, err, sizeof err) &&
               !chainfd_rollout_run(r, B, H, init, 0, ctrl, out, 0, CHAINFD_HOST, err, sizeof err);
      for (int rep = 0; ok && rep < 7; rep++) {
        double a = now();
        chainfd_rollout_run(r, B, H, dinit, 0, dctrl, dout, 0, CHAINFD_DEVICE, err, sizeof err);
        res[rep] = now() - a;
        a = now();
        chainfd_rollout_run(r, B, H, init, 0, ctrl, out, 0, CHAINFD_HOST, err, sizeof err);
        e2e[rep] = now() - a;
        a = now();
        chainfd_rollout_run(r, B, H, pinit, 0, pctrl, pout, 0, CHAINFD_HOST, err, sizeof err);
        pin[rep] = now() - a;
        one[rep] = 0;
        cfd_gpu_tuning thread = {.rollout_thread = 1}, link_frames = {.rollout_link_frames = 1};
        cfd_rollout_set_tuning(r, &thread, err, sizeof err);  // a thread per instance beside the lanes
        a = now();
        chainfd_rollout_run(r, B, H, dinit, 0, dctrl, dout, 0, CHAINFD_DEVICE, err, sizeof err);
        one[rep] = now() - a;
        cfd_rollout_set_tuning(r, &link_frames, err, sizeof err);  // lanes in link frames beside world's
        a = now();
        chainfd_rollout_run(r, B, H, dinit, 0, dctrl, dout, 0, CHAINFD_DEVICE, err, sizeof err);
        other[rep] = now() - a;
        cfd_rollout_set_tuning(r, NULL, err, sizeof err);
      }
      if (!ok) printf("%7d %5d  error: %s\n", B, H, err);
      else {
        double tr = cfd_median(res, 7), te = cfd_median(e2e, 7), tp = cfd_median(pin, 7), to = cfd_median(one, 7);
        double steps = (double)B * H;
        double mj_time = B < cores ? H * (double)cores / mj_rate : steps / mj_rate;  // per batch
        double tx = cfd_median(other, 7);
        printf("%7d %5d %14.3g %14.3g %14.3g %14.3g %10.3f %14.3g %10.3f %9.0fx\n", B, H, mj_rate,
               steps / tr, to > 0 ? steps / to : 0, tx > 0 ? steps / tx : 0, te * 1e3, steps / tp,
               tp * 1e3, mj_time / tr);
        char fig[32];  // us_per_batch is per rollout batch of B x H env-steps
        snprintf(fig, sizeof fig, "rollout_H%d", H);
        emit(fig, spec, n, B, "mujoco.allcores.mj_step", mj_time * 1e6, 0, 0);
        emit(fig, spec, n, B, "cuda.rollout.resident", tr * 1e6, chainfd_rollout_last_kernel_ms(r) * 1e3, 0);
        if (to > 0) emit(fig, spec, n, B, "cuda.rollout.resident.thread_per_instance", to * 1e6, 0, 0);
        if (tx > 0) emit(fig, spec, n, B, "cuda.rollout.resident.lanes_link_frames", tx * 1e6, 0, 0);
        emit(fig, spec, n, B, "cuda.rollout.end_to_end", te * 1e6, 0, 0);
        emit(fig, spec, n, B, "cuda.rollout.end_to_end.pinned", tp * 1e6, 0, 0);
      }
      chainfd_host_free(pinit); chainfd_host_free(pctrl); chainfd_host_free(pout);
      fflush(stdout);
      cudaFree(dinit); cudaFree(dctrl); cudaFree(dout);
      free(init); free(ctrl); free(out);
    }
    free(pool_init); free(pool_ctrl);
  }
  for (int t = 0; t < cores; t++) mj_deleteData(datas[t]);
  chainfd_rollout_free(r);
  mj_deleteModel(m);
}


// ---- peers: chainfd's side of bench/peers' GPU table ---------------------------------------------
// The models and batches bench/peers/peers_gpu.py times MJX and MuJoCo Warp on (the same MJCF
// files), the same problems: forward dynamics with constraints, contacts, actuation, springs and
// damping disabled (qacc = (M + diag(armature))^-1 (qfrc_applied - bias)), cuda.abia from device
// arrays, and cpu.fast on one core at B = 1; steps with constraints and contacts disabled,
// chainfd_rollout of H steps from device arrays (final states only, as a scan returns them), the
// time per batch step. us_per_batch is per batched call (fd) or per batched step (step).
// Returns the number of rows that failed (a model not loaded or refused, a call that failed).
// Step rows are not checked here (max_rel_err -1): chainfd_rollout against mj_step is test_rollout's.
static int peers(const char* const* models, int nmodels, const int* batches, int nb, int H,
                 double budget) {
  char err[1024];
  int failed = 0;
  for (int k = 0; k < nmodels; k++) {
    const char* eq = strchr(models[k], '=');
    char label[128];
    snprintf(label, sizeof label, "%.*s", eq ? (int)(eq - models[k]) : 0, models[k]);
    const char* path = eq ? eq + 1 : models[k];
    model_set s;
    if (make_set_flags(path, &s, 1, mjDSBL_CONTACT | mjDSBL_ACTUATION | mjDSBL_SPRING | mjDSBL_DAMPER, 1)) {
      free_set(&s);
      failed++;
      continue;
    }
    int n = s.chain.n;
    printf("\n== peers: %s (%s, n = %d) ==\n", label, path, n);
    double f1 = fast_one_us(&s, budget);
    emit("peers_fd", label, n, 1, "cpu.fast", f1, 0, 0);
    printf("fd   B=%6d cpu.fast (1 core) %10.2f us\n", 1, f1);
    for (int i = 0; i < nb; i++) {
      int B = batches[i];
      if ((double)B * n > 64e6) { printf("fd   B=%6d skipped: %d x %d dofs\n", B, B, n); continue; }
      gpu_meas gm = gpu_time(&s, CFD_GPU_ABIA, B, budget);
      if (!gm.ok) {
        failed++;
        continue;
      }
      emit("peers_fd", label, n, B, "cuda.abia", gm.wall_us, gm.kernel_us, gm.err);
      printf("fd   B=%6d cuda.abia %10.2f us (kernel %.2f)  %.3g FD/s  err %.1e\n", B, gm.wall_us,
             gm.kernel_us, B / (gm.wall_us * 1e-6), gm.err);
      fflush(stdout);
    }
    free_set(&s);

    mjModel* m = cfd_load_model(path, err, sizeof err);
    if (!m) { fprintf(stderr, "%s: %s\n", path, err); failed++; continue; }
    m->opt.disableflags |= mjDSBL_CONSTRAINT | mjDSBL_CONTACT;
    chainfd_rollout* r;
    if (chainfd_rollout_create(m, 0, &r, err, sizeof err)) {
      printf("step refused: %s\n", err);
      mj_deleteModel(m);
      failed++;
      continue;
    }
    int nx = 2 * m->nv, nu = m->nu;
    mjData* d = mj_makeData(m);
    for (int i = 0; i < nb; i++) {
      int B = batches[i];
      if ((double)B * nx * 8 * 2 > 8e9 || (double)B * H * nu * 8 > 8e9) {
        printf("step B=%6d skipped: memory\n", B);
        continue;
      }
      double* init = NEED(malloc(sizeof(double) * (size_t)B * nx));
      double* ctrl = NEED(malloc(sizeof(double) * (size_t)B * H * (nu ? nu : 1)));
      cfd_rng rng = {7};
      for (int b = 0; b < B; b++) {
        if (b < POOL) {
          mj_resetData(m, d);
          cfd_random_state(m, d, &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL);
          chainfd_rollout_get_state(m, d, init + (size_t)b * nx);
        } else {
          memcpy(init + (size_t)b * nx, init + (size_t)(b % POOL) * nx, sizeof(double) * nx);
        }
      }
      for (size_t j = 0; j < (size_t)B * H * nu; j++) ctrl[j] = cfd_rng_uniform(&rng, -1, 1);
      double *dinit, *dctrl, *dout;
      cudaError_t e = upload_batch(B, H, nx, nu, 1, init, ctrl, &dinit, &dctrl, &dout);
      double total = e ? 0 : rollout_resident_us(r, B, H, 1, dinit, dctrl, dout, NULL);
      if (e) fprintf(stderr, "step B=%d: device arrays: %s\n", B, cudaGetErrorString(e));
      if (!(total > 0)) {
        printf("step B=%6d failed (above)\n", B);
        failed++;
      } else {
        double us = total / H;
        emit("peers_step", label, n, B, "cuda.rollout", us, 0, -1);
        printf("step B=%6d chainfd_rollout %10.2f us per batch step  %.3g steps/s\n", B, us, B / (us * 1e-6));
      }
      fflush(stdout);
      cudaFree(dinit); cudaFree(dctrl); cudaFree(dout);
      free(init); free(ctrl);
    }
    mj_deleteData(d);
    chainfd_rollout_free(r);
    mj_deleteModel(m);
  }
  return failed;
}

// ---- rollouts with joint limits and friction loss against the same rollouts without ----------------
// The arm as it is, and with every joint limited to +-LIM_RANGE rad (rows in most of the random
// states and along their rollouts: rollout_step.h solves them in the step), and with a friction
// loss on every joint besides (a row in every state),
// resident on the device, H = 64, the same starts and controls; the arm without rows also by one
// thread per instance, the kernel the limited arm takes. Medians of 7 runs, us per batch.
#define LIM_RANGE 0.5
static void rollout_limits(const char* spec, int maxB, double frictionloss) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  mjModel* ml = cfd_load_model(spec, err, sizeof err);
  if (!m || !ml) { fprintf(stderr, "%s: %s\n", spec, err); return; }
  for (int j = 0; j < ml->njnt; j++) {
    ml->jnt_limited[j] = 1;
    ml->jnt_range[2 * j] = -LIM_RANGE;
    ml->jnt_range[2 * j + 1] = LIM_RANGE;
    ml->dof_frictionloss[ml->jnt_dofadr[j]] = frictionloss;
  }
  int n = m->nv, nu = m->nu, nx = 2 * n, H = 64;
  chainfd_rollout *r, *rl;
  if (chainfd_rollout_create(m, 0, &r, err, sizeof err) ||
      chainfd_rollout_create(ml, 0, &rl, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  printf("\n== rollouts with limits (+-%g rad) and friction loss %g on every joint: %s, H = %d, "
         "resident, us per batch ==\n", LIM_RANGE, frictionloss, spec, H);
  printf("%7s %14s %14s %14s %10s %10s %16s\n", "B", "no rows", "no rows thread", "rows",
         "rows/no", "rows/thr", "rows at start");
  mjData* d = mj_makeData(ml);
  for (int B = 1024; B <= maxB; B *= 4) {
    double* init = NEED(malloc(sizeof(double) * (size_t)B * nx));
    double* ctrl = NEED(malloc(sizeof(double) * (size_t)B * H * (nu ? nu : 1)));
    cfd_rng rng = {11};
    long with_rows = 0;
    for (int b = 0; b < B; b++) {
      mj_resetData(ml, d);
      cfd_random_state(ml, d, &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL);
      for (int i = 0; i < ml->nq; i++) d->qpos[i] *= 0.5;  // about half inside the limits
      chainfd_rollout_get_state(ml, d, init + (size_t)b * nx);
      if (b < 256) {  // how many starts have a limit row (friction rows: always)
        mj_forward(ml, d);
        with_rows += d->nl > 0;
      }
    }
    for (size_t k = 0; k < (size_t)B * H * nu; k++) ctrl[k] = cfd_rng_uniform(&rng, -1, 1);
    double *dinit, *dctrl, *dout;
    upload_batch(B, H, nx, nu, 0, init, ctrl, &dinit, &dctrl, &dout);
    cfd_gpu_tuning thread = {.rollout_thread = 1};
    double t0 = rollout_resident_us(r, B, H, 0, dinit, dctrl, dout, NULL);
    double t1 = rollout_resident_us(r, B, H, 0, dinit, dctrl, dout, &thread);
    double t2 = rollout_resident_us(rl, B, H, 0, dinit, dctrl, dout, NULL);
    printf("%7d %14.1f %14.1f %14.1f %9.2fx %9.2fx %13.0f%%\n", B, t0, t1, t2, t2 / t0, t2 / t1,
           100.0 * with_rows / (B < 256 ? B : 256));
    emit("rollout_limits_H64", spec, n, B, "cuda.rollout.resident", t0, 0, 0);
    emit("rollout_limits_H64", spec, n, B, "cuda.rollout.resident.thread_per_instance", t1, 0, 0);
    emit("rollout_limits_H64", spec, n, B,
         frictionloss > 0 ? "cuda.rollout.resident.limits_frictionloss" : "cuda.rollout.resident.limits",
         t2, 0, 0);
    fflush(stdout);
    cudaFree(dinit); cudaFree(dctrl); cudaFree(dout);
    free(init); free(ctrl);
  }
  mj_deleteData(d);
  chainfd_rollout_free(r);
  chainfd_rollout_free(rl);
  mj_deleteModel(m);
  mj_deleteModel(ml);
}

// A model's own rows (limits, friction loss, joint equalities) against the same model with
// constraints disabled, H = 64, resident
static void rollout_model_rows(const char* path, int maxB) {
  char err[1024];
  mjModel* m = cfd_load_model(path, err, sizeof err);
  mjModel* ml = cfd_load_model(path, err, sizeof err);
  if (!m || !ml) { fprintf(stderr, "%s: %s\n", path, err); return; }
  m->opt.disableflags |= mjDSBL_CONSTRAINT;
  int n = m->nv, nu = m->nu, nx = 2 * n, H = 64;
  chainfd_rollout *r, *rl;
  if (chainfd_rollout_create(m, 0, &r, err, sizeof err) ||
      chainfd_rollout_create(ml, 0, &rl, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  printf("\n== rollouts with the model's rows (neq %d, limited joints and friction loss as "
         "written) against constraints disabled: %s, H = %d, resident, us per batch ==\n",
         (int)ml->neq, path, H);
  printf("%7s %14s %14s %10s\n", "B", "no rows", "rows", "rows/no");
  mjData* d = mj_makeData(ml);
  for (int B = 1024; B <= maxB; B *= 4) {
    double* init = NEED(malloc(sizeof(double) * (size_t)B * nx));
    double* ctrl = NEED(malloc(sizeof(double) * (size_t)B * H * (nu ? nu : 1)));
    cfd_rng rng = {11};
    for (int b = 0; b < B; b++) {
      mj_resetData(ml, d);
      cfd_random_state(ml, d, &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL);
      for (int i = 0; i < ml->nq; i++) d->qpos[i] *= 0.5;
      chainfd_rollout_get_state(ml, d, init + (size_t)b * nx);
    }
    for (size_t k = 0; k < (size_t)B * H * nu; k++) ctrl[k] = cfd_rng_uniform(&rng, -1, 1);
    double *dinit, *dctrl, *dout;
    upload_batch(B, H, nx, nu, 0, init, ctrl, &dinit, &dctrl, &dout);
    double t0 = rollout_resident_us(r, B, H, 0, dinit, dctrl, dout, NULL);
    double t1 = rollout_resident_us(rl, B, H, 0, dinit, dctrl, dout, NULL);
    printf("%7d %14.1f %14.1f %9.2fx\n", B, t0, t1, t1 / t0);
    emit("rollout_rows_H64", path, n, B, "cuda.rollout.resident.no_rows", t0, 0, 0);
    emit("rollout_rows_H64", path, n, B, "cuda.rollout.resident.rows", t1, 0, 0);
    fflush(stdout);
    cudaFree(dinit); cudaFree(dctrl); cudaFree(dout);
    free(init); free(ctrl);
  }
  mj_deleteData(d);
  chainfd_rollout_free(r);
  chainfd_rollout_free(rl);
  mj_deleteModel(m);
  mj_deleteModel(ml);
}

// ---- rollouts of one long chain or a few: per step, GPU against mj_step ---------------------------
// Past 256 links and up to 1024 instances each step's dynamics is the scan kernel's (two launches a
// step); the lanes kernel, which takes the links in turn, beside it. MuJoCo's mj_step costs the
// same at any state of such a chain (a dense mass matrix to factor), so a few steps per core
// give its per-step time: one core, and all cores with one mjData each.
static void long_rollouts(const char* spec, const char* label, int cores, double budget) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  if (!m) { fprintf(stderr, "%s: %s\n", spec, err); return; }
  int n = m->nv, nu = m->nu, nx = 2 * n, H = 16;
  chainfd_rollout* r;
  if (chainfd_rollout_create(m, 0, &r, err, sizeof err)) { fprintf(stderr, "%s\n", err); mj_deleteModel(m); return; }
  printf("\n== rollouts of long chains: %s (n = %d), H = %d, us per step of the batch ==\n", label, n, H);
  printf("%5s %14s %14s %12s %12s %10s %12s\n", "B", "mj_step 1 core", "MuJoCo batch", "GPU scan",
         "GPU lanes", "scan/lanes", "vs MuJoCo");
  mjData* datas[256];
  for (int t = 0; t < cores; t++) datas[t] = mj_makeData(m);
  double* pool_init = NEED(malloc(sizeof(double) * POOL * nx));
  double* pool_ctrl = NEED(malloc(sizeof(double) * POOL * H * (nu ? nu : 1)));
  cfd_rng rng = {11};
  for (int k = 0; k < POOL; k++) {
    mj_resetData(m, datas[0]);
    cfd_random_state(m, datas[0], &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL);
    chainfd_rollout_get_state(m, datas[0], pool_init + (size_t)k * nx);
  }
  for (size_t k = 0; k < (size_t)POOL * H * nu; k++) pool_ctrl[k] = cfd_rng_uniform(&rng, -1, 1);
  // MuJoCo: 4 steps on one core, then 4 on every core at once (median of three each)
  double one[3], all[3];
  for (int rep = 0; rep < 3; rep++) {
    step_job job = {m, datas[0], pool_init, pool_ctrl, 0, 1, 4, nx};
    double a = now();
    step_worker(&job);
    one[rep] = (now() - a) / 4;
    pthread_t tid[256];
    step_job jobs[256];
    a = now();
    for (int t = 0; t < cores; t++) {
      jobs[t] = (step_job){m, datas[t], pool_init, pool_ctrl, t, 1, 4, nx};
      pthread_create(&tid[t], NULL, step_worker, &jobs[t]);
    }
    for (int t = 0; t < cores; t++) pthread_join(tid[t], NULL);
    all[rep] = (now() - a) / 4 / cores;  // per env-step with every core busy
  }
  double mj_one = cfd_median(one, 3), mj_all = cfd_median(all, 3);
  int Bs[5] = {1, 8, 64, 256, 1024};
  for (int bi = 0; bi < 5; bi++) {
    int B = Bs[bi];
    double *dinit, *dctrl, *dout;
    cudaMalloc((void**)&dinit, sizeof(double) * (size_t)B * nx);
    cudaMalloc((void**)&dctrl, sizeof(double) * (size_t)B * H * (nu ? nu : 1));
    cudaMalloc((void**)&dout, sizeof(double) * (size_t)B * nx);
    for (int b = 0; b < B; b++) {
      cudaMemcpy(dinit + (size_t)b * nx, pool_init + (size_t)(b % POOL) * nx, sizeof(double) * nx,
                 cudaMemcpyHostToDevice);
      cudaMemcpy(dctrl + (size_t)b * H * nu, pool_ctrl + (size_t)(b % POOL) * H * nu,
                 sizeof(double) * H * nu, cudaMemcpyHostToDevice);
    }
    double scan[9], lanes[9];
    int reps = 0, ok = 1;
    double t0 = now();
    for (; ok && reps < 9 && (reps < 3 || now() - t0 < budget); reps++) {
      double a = now();
      ok &= !chainfd_rollout_run(r, B, H, dinit, 0, dctrl, dout, 1, CHAINFD_DEVICE, err, sizeof err);
      scan[reps] = (now() - a) / H;
      cfd_gpu_tuning no_scan = {.rollout_no_scan = 1};
      cfd_rollout_set_tuning(r, &no_scan, err, sizeof err);
      a = now();
      ok &= !chainfd_rollout_run(r, B, H, dinit, 0, dctrl, dout, 1, CHAINFD_DEVICE, err, sizeof err);
      lanes[reps] = (now() - a) / H;
      cfd_rollout_set_tuning(r, NULL, err, sizeof err);
    }
    if (!ok) printf("%5d  error: %s\n", B, err);
    else {
      double ts = cfd_median(scan, reps), tl = cfd_median(lanes, reps);
      // MuJoCo's step of the batch: one core for one instance, else B on all cores (B below
      // the core count: each on a core of a busy host)
      double mj = B == 1 ? mj_one : mj_all * (B < cores ? cores : B);
      printf("%5d %14.1f %14.1f %12.1f %12.1f %9.1fx %11.0fx\n", B, mj_one * 1e6, mj * 1e6,
             ts * 1e6, tl * 1e6, tl / ts, mj / ts);
      emit("rollout_long_H16", spec, n, B, B == 1 ? "mujoco.1core.mj_step" : "mujoco.allcores.mj_step",
           mj * 1e6, 0, 0);
      emit("rollout_long_H16", spec, n, B, "cuda.rollout.scan", ts * 1e6, 0, 0);
      emit("rollout_long_H16", spec, n, B, "cuda.rollout.lanes", tl * 1e6, 0, 0);
    }
    fflush(stdout);
    cudaFree(dinit); cudaFree(dctrl); cudaFree(dout);
  }
  free(pool_init); free(pool_ctrl);
  for (int t = 0; t < cores; t++) mj_deleteData(datas[t]);
  chainfd_rollout_free(r);
  mj_deleteModel(m);
}

// ---- rollouts split across every visible GPU (CHAINFD_ALL_GPUS) against GPU 0 alone ---------------
// End to end from page-locked host arrays (a split batch takes host arrays): each device copies its
// share up, steps it and copies it down, in its own host thread.
static void multi_gpu(const char* spec, const char* label, int maxB, double budget) {
  char err[1024];
  int ndev = cfd_gpu_device_count();
  printf("\n== rollouts on %d GPU(s) against GPU 0: %s, end to end from pinned host memory ==\n", ndev,
         label);
  if (ndev < 2) {
    printf("skipped: one CUDA device\n");
    return;
  }
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  if (!m) { fprintf(stderr, "%s: %s\n", spec, err); return; }
  chainfd_rollout *one, *all;
  if (chainfd_rollout_create(m, 0, &one, err, sizeof err)) { fprintf(stderr, "%s\n", err); mj_deleteModel(m); return; }
  if (chainfd_rollout_create(m, CHAINFD_ALL_GPUS, &all, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    chainfd_rollout_free(one);
    mj_deleteModel(m);
    return;
  }
  int n = m->nv, nu = m->nu, nx = 2 * n, H = 128;
  mjData* d = mj_makeData(m);
  printf("%7s %5s %14s %14s %9s %10s\n", "B", "H", "GPU 0", "all GPUs", "speed-up", "max |diff|");
  for (int B = 1024; B <= maxB; B *= 4) {
    double* init = chainfd_host_alloc(sizeof(double) * (size_t)B * nx);
    double* ctrl = chainfd_host_alloc(sizeof(double) * (size_t)B * H * (nu ? nu : 1));
    double* out1 = chainfd_host_alloc(sizeof(double) * (size_t)B * (H + 1) * nx);
    double* outN = chainfd_host_alloc(sizeof(double) * (size_t)B * (H + 1) * nx);
    if (!init || !ctrl || !out1 || !outN) {
      printf("%7d %5d  out of pinned host memory\n", B, H);
      chainfd_host_free(init); chainfd_host_free(ctrl); chainfd_host_free(out1); chainfd_host_free(outN);
      break;
    }
    cfd_rng rng = {11};
    for (int b = 0; b < B; b++) {
      mj_resetData(m, d);
      cfd_random_state(m, d, &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL);
      chainfd_rollout_get_state(m, d, init + (size_t)b * nx);
    }
    for (size_t k = 0; k < (size_t)B * H * nu; k++) ctrl[k] = cfd_rng_uniform(&rng, -1, 1);
    int ok = !chainfd_rollout_run(one, B, H, init, 0, ctrl, out1, 0, CHAINFD_HOST, err, sizeof err) &&
             !chainfd_rollout_run(all, B, H, init, 0, ctrl, outN, 0, CHAINFD_HOST, err, sizeof err);
    double diff = 0;  // the split must not change a single trajectory
    for (size_t k = 0; ok && k < (size_t)B * (H + 1) * nx; k++) {
      double e = out1[k] == outN[k] || (isnan(out1[k]) && isnan(outN[k])) ? 0 : fabs(out1[k] - outN[k]);
      diff = cfd_worst(diff, e);
    }
    double t1[7], tN[7];
    int reps = 0;
    for (; ok && reps < 7; reps++) {
      double a = now();
      ok = !chainfd_rollout_run(one, B, H, init, 0, ctrl, out1, 0, CHAINFD_HOST, err, sizeof err);
      t1[reps] = now() - a;
      a = now();
      ok = ok && !chainfd_rollout_run(all, B, H, init, 0, ctrl, outN, 0, CHAINFD_HOST, err, sizeof err);
      tN[reps] = now() - a;
      if (reps >= 2 && t1[reps] + tN[reps] > 7 * budget) { reps++; break; }
    }
    if (!ok) printf("%7d %5d  error: %s\n", B, H, err);
    else {
      double a1 = cfd_median(t1, reps), aN = cfd_median(tN, reps), steps = (double)B * H;
      printf("%7d %5d %14.3g %14.3g %8.2fx %10.1e\n", B, H, steps / a1, steps / aN, a1 / aN, diff);
      emit("rollout_multi_gpu", spec, n, B, "cuda.rollout.end_to_end.pinned.gpu0", a1 * 1e6, 0, 0);
      emit("rollout_multi_gpu", spec, n, B, "cuda.rollout.end_to_end.pinned.all_gpus", aN * 1e6, 0, diff);
    }
    fflush(stdout);
    chainfd_host_free(init); chainfd_host_free(ctrl); chainfd_host_free(out1); chainfd_host_free(outN);
    if (!ok) break;
  }
  mj_deleteData(d);
  chainfd_rollout_free(one);
  chainfd_rollout_free(all);
  mj_deleteModel(m);
}

// ---- trees: floating bases and ball joints (the thread-per-instance tree kernel) -------------------

// One long ball-joint chain (tiled past MuJoCo's depth limit): one forward dynamics on one core
// (cpu.fast) and on the GPU by cuda.abia's rule (the scans past 128 links), then the scans
// against the thread-per-instance tree kernel in small batches, where the rule draws their line.
static void ball_chain(int balls, int maxB, double budget) {
  char spec[128];
  snprintf(spec, sizeof spec, "tile(chain:100,ball=1,armature=0.001):%d balls", balls);
  model_set s;
  if (make_tiled_set_of("chain:100,ball=1,armature=0.001", 3 * balls, &s)) return;
  int n = s.chain.n;
  double tfast = fast_one_us(&s, budget);
  emit("trees", spec, n, 1, "cpu.fast", tfast, 0, 0);
  gpu_meas gm = gpu_time(&s, CFD_GPU_ABIA, 1, budget);
  if (gm.ok) emit("trees", spec, n, 1, "cuda.abia", gm.wall_us, gm.kernel_us, gm.err);
  printf("%-44s %6d dofs: cpu.fast %10.1f us   cuda.abia %10.1f us (kernel %.1f, err %.1e)\n",
         spec, n, tfast, gm.ok ? gm.wall_us : 0, gm.ok ? gm.kernel_us : 0, gm.ok ? gm.err : 0);
  static const int Bs[] = {1, 16, 64, 256, 1024, 4096, 16384, 65536};
  for (int k = 0; k < 8 && Bs[k] <= maxB; k++) {
    cfd_gpu_tuning scan = {.abia_kernel = CFD_ABIA_SCAN};
    cfd_gpu_tuning tree = {.abia_kernel = n <= 64 ? CFD_ABIA_WORLD_TREE : CFD_ABIA_TREE};
    gpu_meas a = gpu_time_tuned(&s, CFD_GPU_ABIA, Bs[k], budget, &scan);
    gpu_meas b = gpu_time_tuned(&s, CFD_GPU_ABIA, Bs[k], budget, &tree);
    if (a.ok) emit("trees", spec, n, Bs[k], "cuda.abia[scan]", a.wall_us, a.kernel_us, a.err);
    if (b.ok) emit("trees", spec, n, Bs[k], "cuda.abia[tree]", b.wall_us, b.kernel_us, b.err);
    printf("%-44s %6d dofs B=%-5d scans %10.1f us   tree kernel %10.1f us (err %.1e, %.1e)\n",
           spec, n, Bs[k], a.ok ? a.wall_us : 0, b.ok ? b.wall_us : 0, a.ok ? a.err : 0,
           b.ok ? b.err : 0);
  }
  free_set(&s);
}

static void trees(int maxB, double budget, int cores) {
  char path[1024];
  snprintf(path, sizeof path, "%s/humanoid_tree.xml", CHAINFD_SCENES_DIR);
  fig3("trees", path, "a 30-dof floating tree (humanoid-like, no contacts)", 1, maxB, budget, cores);
  snprintf(path, sizeof path, "%s/panda_hand.xml", CHAINFD_SCENES_DIR);
  fig3("trees", path, "a Panda-like arm with a two-finger hand", 1, maxB, budget, cores);
  rollouts(path, "a Panda-like arm with a two-finger hand", maxB, cores, budget);
  printf("\n== one long ball-joint chain, time of one forward dynamics ==\n");
  ball_chain(10, maxB, budget);
  ball_chain(40, maxB, budget);
  ball_chain(100, maxB < 4096 ? maxB : 4096, budget);
  ball_chain(300, maxB < 1024 ? maxB : 1024, budget);
  ball_chain(1000, maxB < 1024 ? maxB : 1024, budget);
}

int main(int argc, char** argv) {
  const char* out = ".";
  int min_n = 1, max_n = 16384, maxB = 65536;
  const char* only = NULL;  // --only cfa|abia|scan|dca|fig2|fig3|rollout|rollout_long|multigpu|trees
  double budget = 0.3;
  const char* prog = "chainfd-bench-gpu";
  const char* peer_models[16];  // --only peers: --model LABEL=PATH (repeated), --batches, --horizon
  int npeer_models = 0, horizon = 64, batches[16] = {1, 64, 1024, 4096, 65536}, nbatches = 5;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (!strcmp(argv[i], "--max-n") && i + 1 < argc) {
      if (cfd_arg_int(prog, argv[i], argv[i + 1], 1, 1 << 20, &max_n)) return 2;
      i++;
    } else if (!strcmp(argv[i], "--min-n") && i + 1 < argc) {
      if (cfd_arg_int(prog, argv[i], argv[i + 1], 1, 1 << 20, &min_n)) return 2;
      i++;
    } else if (!strcmp(argv[i], "--max-batch") && i + 1 < argc) {
      if (cfd_arg_int(prog, argv[i], argv[i + 1], 1, 1 << 24, &maxB)) return 2;
      i++;
    } else if (!strcmp(argv[i], "--budget") && i + 1 < argc) {
      if (cfd_arg_double(prog, argv[i], argv[i + 1], 1e-3, 3600, &budget)) return 2;
      i++;
    } else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--model") && i + 1 < argc) {
      if (npeer_models == 16 || !strchr(argv[i + 1], '=') || argv[i + 1][0] == '=') {
        fprintf(stderr, "%s: --model takes LABEL=PATH, at most 16 times\n", prog);
        return 2;
      }
      peer_models[npeer_models++] = argv[++i];
    } else if (!strcmp(argv[i], "--horizon") && i + 1 < argc) {
      if (cfd_arg_int(prog, argv[i], argv[i + 1], 1, 4096, &horizon)) return 2;
      i++;
    } else if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
      char list[256], *save = NULL;
      snprintf(list, sizeof list, "%s", argv[++i]);
      nbatches = 0;
      for (char* tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (nbatches == 16 || cfd_arg_int(prog, "--batches", tok, 1, 1 << 22, &batches[nbatches])) return 2;
        nbatches++;
      }
      if (!nbatches) { fprintf(stderr, "%s: --batches takes B,B,...\n", prog); return 2; }
    } else if (!strcmp(argv[i], "--cfa-steps") && i + 1 < argc) {
      int k;  // 0: no refinement
      if (cfd_arg_int(prog, argv[i], argv[i + 1], 0, 64, &k)) return 2;
      i++;
      cfa_steps = k > 0 ? k : CFD_CFA_NO_REFINE;
    }
    else {
      fprintf(stderr, "usage: chainfd-bench-gpu [--out DIR] [--min-n N] [--max-n N] [--max-batch B] [--budget S] [--only cfa|abia|scan|dca|fig2|fig3|rollout|rollout_limits|rollout_long|multigpu|trees|deriv|deriv_long|peers] [--cfa-steps K] [--model LABEL=PATH ... --batches B,B,... --horizon H]\n");
      return 2;
    }
  }
  if (min_n > max_n) {
    fprintf(stderr, "%s: --min-n %d is above --max-n %d\n", prog, min_n, max_n);
    return 2;
  }
  static const char* const parts[] = {"cfa", "abia", "scan", "dca", "fig2", "fig3", "rollout",
                                      "rollout_limits", "rollout_long", "multigpu", "trees", "deriv", "deriv_long",
                                      "peers"};
  int known = !only;
  for (int k = 0; k < (int)(sizeof parts / sizeof parts[0]) && !known; k++) known = !strcmp(only, parts[k]);
  if (!known) {
    fprintf(stderr, "%s: --only takes cfa, abia, scan, dca, fig2, fig3, rollout, rollout_limits, "
            "rollout_long, multigpu, trees, deriv, deriv_long or peers, not '%s'\n", prog, only);
    return 2;
  }
  if ((only && !strcmp(only, "peers")) != (npeer_models > 0)) {
    fprintf(stderr, "%s: --model goes with --only peers, which needs at least one\n", prog);
    return 2;
  }
  if (cfd_gpu_device_count() == 0) {
    fprintf(stderr, "chainfd-bench-gpu: no CUDA device\n");
    return 1;
  }
  // the output is opened before anything runs, so that a directory that cannot be written fails now
  char dev[256], path[1024];
  snprintf(path, sizeof path, "%s/bench_gpu.json", out);
  json = fopen(path, "w");
  if (!json) {
    fprintf(stderr, "%s: cannot write --out %s: %s\n", prog, path, strerror(errno));
    return 2;
  }
  cfd_gpu_device_name(0, dev, sizeof dev);
  int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (cores > 256) cores = 256;
  printf("device: %s\nhost cores: %d, MuJoCo %s\n", dev, cores, mj_versionString());
  fprintf(json, "{\n  \"device\": \"%s\",\n  \"host_cores\": %d,\n  \"mujoco\": \"%s\",\n  \"results\": [\n",
          dev, cores, mj_versionString());

  char arm[1024];
  snprintf(arm, sizeof arm, "%s/arm7.xml", CHAINFD_SCENES_DIR);
  if (!only || !strcmp(only, "cfa")) cfa_layouts(min_n, max_n, budget);
  if (!only || !strcmp(only, "abia")) abia_variants(arm, budget);
  if (!only || !strcmp(only, "scan")) abia_scan_lengths(min_n, max_n, budget);
  if (!only || !strcmp(only, "dca")) dca_lengths(min_n, max_n, budget);
  if (!only || !strcmp(only, "fig2")) fig2(min_n, max_n, budget);
  if (!only || !strcmp(only, "fig3")) {
    fig3("fig3", "chain:10,random=1,seed=1,armature=0.01", "10 links", 1, maxB, budget, cores);
    fig3("fig3", "chain:200,random=1,seed=1,armature=0.01", "200 links", 1, maxB, budget, cores);
    fig3("arm7", arm, "the 7-dof arm", 1024, maxB, budget, cores);
  }
  if (!only || !strcmp(only, "rollout")) {
    rollouts(arm, "the 7-dof arm", maxB, cores, budget);
    // the world lanes' widest groups: 16 of 16 lanes busy, 24 of 32
    rollouts("chain:16,random=1,seed=1,damping=0.1,armature=0.01,actuators=1", "a 16-link chain",
             maxB, cores, budget);
    rollouts("chain:24,random=1,seed=1,damping=0.1,armature=0.01,actuators=1", "a 24-link chain",
             maxB, cores, budget);
    rollouts("chain:50,random=1,seed=1,damping=0.1,armature=0.01,actuators=1", "a 50-link chain",
             maxB, cores, budget);
  }
  if (!only || !strcmp(only, "rollout_limits")) {
    rollout_limits(arm, maxB, 0);
    rollout_limits(arm, maxB, 0.05);
    rollout_model_rows(CHAINFD_TESTS_DIR "/constraints/arm_equality_serial.xml", maxB);
    rollout_model_rows(CHAINFD_TESTS_DIR "/constraints/arm_gripper_equality.xml", maxB);
  }
  if (!only || !strcmp(only, "deriv")) {
    deriv_latency(arm, 1024);
    derivatives(arm, maxB);
    derivatives("chain:16,random=1,seed=21,branch=0.3,slide=0.2,damping=0.2,armature=0.02,"
                "stiffness=0.5,actuators=1", maxB);
    derivatives("chain:30,random=1,seed=3,branch=0.3,damping=0.1,armature=0.01,actuators=1", maxB);
  }
  // (minutes of MuJoCo's finite differences on every core: only when asked)
  if (only && !strcmp(only, "deriv_long")) {
    deriv_long("chain:100,random=1,seed=3,damping=0.1,armature=0.01");
    deriv_long("chain:300,random=1,seed=3,damping=0.1,armature=0.01");
    deriv_long("chain:1000,random=1,seed=3,damping=0.1,armature=0.01");
  }
  if (!only || !strcmp(only, "rollout_long")) {
    long_rollouts("chain:300,random=1,seed=1,damping=0.1,armature=0.01,actuators=1", "300 links",
                  cores, budget);
    long_rollouts("chain:1000,random=1,seed=1,damping=0.1,armature=0.01,actuators=1", "1000 links",
                  cores, budget);
  }
  if (!only || !strcmp(only, "multigpu")) {
    multi_gpu(arm, "the 7-dof arm", maxB, budget);
    multi_gpu("chain:50,random=1,seed=1,damping=0.1,armature=0.01,actuators=1", "a 50-link chain",
              maxB < 16384 ? maxB : 16384, budget);  // B = 16384: 1.7 GB of trajectories each way
  }
  if (!only || !strcmp(only, "trees")) trees(maxB, budget, cores);
  int failed = 0;
  if (only && !strcmp(only, "peers")) failed = peers(peer_models, npeer_models, batches, nbatches, horizon, budget);
  fprintf(json, "\n  ]\n}\n");
  fclose(json);
  printf("\nwrote %s\n", path);
  if (failed) fprintf(stderr, "%s: %d row(s) failed (above)\n", prog, failed);
  return failed ? 1 : 0;
}
