// chainfd-bench-step: chainfd_step against mj_step, side by side in one run, on the same model and
// start state: median time per step over repetitions, for each back end (the GPU ones where a
// device exists), n = 7 (the arm), 50, 100, 200, 256, 300, 500, 1000. Also checks that the
// trajectories agree.
//
//   build/bench/chainfd-bench-step [--steps K] [--json FILE]
//   build/bench/chainfd-bench-step --model FILE [--model FILE ...] [--steps K] [--backend NAME]
//                                  [--reps R] [--settle N]
// With --model (an MJCF file or chain:N,...), each model as a user steps it: chainfd_step (the
// model declares the plugin) or a stepper with the default configuration, or --backend's (it does
// not) against mj_step, from the model's first keyframe (or qpos0) after N steps of chainfd's (a
// rope landed on its floor), the two interleaved over R repetitions (101) of K steps; one line
// per model:
//   MODEL BACKEND step_us=X mj_step_us=Y ratio=Z nefc=W   (medians; ratio: the median over the
//   repetitions of mj_step's time over chainfd_step's, each pair run back to back; nefc: the
//   constraint rows a step had, on average)
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../cli/args.h"
#include "chain_gen.h"
#include "chainfd.h"
#include "backend.h"
#include "cfd_median.h"
#include "gpu.h"
#include "step_internal.h"
#include "mj_random.h"

#define MODEL_REPS 101

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// median over 5 repetitions of the time per step of `steps` steps from the same start
static double time_steps(const mjModel* m, mjData* d, const mjData* start, chainfd_stepper* s,
                         int steps, double* qpos_end) {
  double reps[5];
  for (int r = 0; r < 5; r++) {
    mj_copyData(d, m, start);
    double t0 = now();
    for (int k = 0; k < steps; k++) {
      if (s) chainfd_stepper_step(s, m, d);
      else mj_step(m, d);
    }
    reps[r] = (now() - t0) / steps;
  }
  memcpy(qpos_end, d->qpos, sizeof(double) * m->nq);
  return cfd_median(reps, 5);
}

// Where a step's time goes. MuJoCo's stages that chainfd_step runs before it needs qacc (the
// position stage without the mass matrix, sensors, the velocity stage, actuation), median us:
static double time_stages(const mjModel* m, mjData* d, const mjData* start) {
  double reps[51];
  for (int r = 0; r < 51; r++) {
    mj_copyData(d, m, start);
    double t0 = now();
    mj_kinematics(m, d); mj_comPos(m, d); mj_camlight(m, d); mj_flex(m, d); mj_tendon(m, d);
    mj_collision(m, d); mj_makeConstraint(m, d); mj_island(m, d); mj_transmission(m, d);
    mj_sensorPos(m, d); mj_fwdVelocity(m, d); mj_sensorVel(m, d); mj_fwdActuation(m, d);
    reps[r] = now() - t0;
  }
  return cfd_median(reps, 51) * 1e6;
}

// and a GPU back end's solves alone on the start state, median us over 51 calls: one state
// (cfd_solver_fd), two (fd2: qacc without and with Euler's diagonal, as a step asks), the split
// call of two back to back (begin then finish at once, so nothing overlaps), and the device time
// of the two-state calls' kernels; then both with CALLER_US of the caller's own work between (a
// spin on the host's clock, standing in for MuJoCo's stages: the split call's overlap).
#define CALLER_US 50.0
static void spin_us(double us) {
  double t0 = now();
  while ((now() - t0) * 1e6 < us) {
  }
}
static void profile_gpu(const mjModel* m, const mjData* start, const char* backend) {
  char err[512];
  cfd_solver* s = cfd_solver_create_on(m, backend, 0, err, sizeof err);
  if (!s) return;
  int n = cfd_solver_chain(s)->n;
  double* x = malloc(sizeof(double) * 7 * n);
  double *q = x, *qd = q + n, *tau = qd + n, *diag = tau + n, *a = diag + n, *b = a + n;
  cfd_rng rng = {5};
  for (int i = 0; i < n; i++) {
    q[i] = start->qpos[i];  // a chain's dofs in order (the generated chains: nq = nv)
    qd[i] = start->qvel[i];
    tau[i] = cfd_rng_uniform(&rng, -1, 1);
    diag[i] = 0.01;
  }
  double t[9][51];
  int failed = 0;
  for (int r = 0; r < 51; r++) {
    double t0 = now();
    failed |= cfd_solver_fd(s, q, qd, tau, NULL, a);
    double t1 = now();
    failed |= cfd_solver_fd2(s, q, qd, tau, diag, a, b);
    double t2 = now();
    t[0][r] = t1 - t0, t[1][r] = t2 - t1;
  }
  for (int r = 0; r < 51; r++) {  // apart: a plain call stops cuda.abia's resident split kernel
    double t2 = now();
    int split = cfd_solver_begin(s, q, qd, diag) == 0;
    double t2b = now();
    if (split) failed |= cfd_solver_finish(s, q, qd, tau, diag, a, b);
    double t3 = now();
    t[2][r] = split ? t3 - t2 : NAN;
    t[5][r] = t2b - t2, t[6][r] = t3 - t2b;
  }
  cfd_solver_time_kernels(s, 1);  // the kernels' device time, apart (the events cost a few us)
  for (int r = 0; r < 51; r++) {
    failed |= cfd_solver_fd2(s, q, qd, tau, diag, a, b);
    t[4][r] = cfd_solver_kernel_ms(s) * 1e-3;
  }
  for (int r = 0; r < 51; r++) {
    int split = cfd_solver_begin(s, q, qd, diag) == 0;
    if (split) failed |= cfd_solver_finish(s, q, qd, tau, diag, a, b);
    t[3][r] = split ? cfd_solver_kernel_ms(s) * 1e-3 : NAN;
  }
  cfd_solver_time_kernels(s, 0);
  for (int r = 0; r < 51; r++) {  // the caller's work between: plain (the work, then fd2)
    double t0 = now();
    spin_us(CALLER_US);
    failed |= cfd_solver_fd2(s, q, qd, tau, diag, a, b);
    t[7][r] = now() - t0;
  }
  for (int r = 0; r < 51; r++) {  // and split (apart, as above)
    double t0 = now();
    int split = cfd_solver_begin(s, q, qd, diag) == 0;
    spin_us(CALLER_US);
    if (split) failed |= cfd_solver_finish(s, q, qd, tau, diag, a, b);
    t[8][r] = split ? now() - t0 : NAN;
  }
  if (failed) {
    printf("               solves: failed (%s)\n", cfd_solver_error(s, CFD_ERR_GPU));
    free(x);
    cfd_solver_free(s);
    return;
  }
  double med[9];
  for (int k = 0; k < 9; k++) med[k] = cfd_median(t[k], 51);
  printf("               solves: one state %.1f us, two %.1f (kernels %.1f)", med[0] * 1e6,
         med[1] * 1e6, med[4] * 1e6);
  if (cfd_solver_splits(s))
    printf(", split call of two back to back %.1f (begin %.1f, finish %.1f; kernels %.1f)",
           med[2] * 1e6, med[5] * 1e6, med[6] * 1e6, med[3] * 1e6);
  printf("\n");
  printf("               with %.0f us of the caller's work between: two %.1f us", CALLER_US,
         med[7] * 1e6);
  if (cfd_solver_splits(s)) printf(", split call %.1f", med[8] * 1e6);
  printf("\n");
  free(x);
  cfd_solver_free(s);
}

// --model FILE: chainfd_step (or the default stepper) against mj_step on the same states, K steps
// from the first keyframe, the two alternating over MODEL_REPS repetitions; medians per step.
static int bench_model(const char* path, int K, const char* backend, int reps, int settle) {
  char err[1024];
  mjModel* m = cfd_load_model(path, err, sizeof err);
  if (!m) {
    fprintf(stderr, "%s: %s\n", path, err);
    return 1;
  }
  int plugin = cfd_plugin_instance(m, CHAINFD_PLUGIN_NAME) >= 0;  // then chainfd_step steps it
  chainfd_stepper* s = NULL;
  if (!plugin) {
    chainfd_config cfg = {backend, NULL, NULL, NULL};  // (NULL: auto), double, auto, fallback=mujoco
    s = chainfd_stepper_create(m, &cfg, "bench", err, sizeof err);
    if (!s) {
      fprintf(stderr, "%s: %s\n", path, err);
      mj_deleteModel(m);
      return 1;
    }
  }
  mjData *start = mj_makeData(m), *a = mj_makeData(m), *b = mj_makeData(m);
  if (m->nkey > 0) mj_resetDataKeyframe(m, start, 0);
  // (settled by chainfd's steps, MuJoCo's being the slow ones on the long models this is for)
  for (int k = 0; k < settle; k++) plugin ? chainfd_step(m, start) : chainfd_stepper_step(s, m, start);
  mj_forward(m, start);
  double tc[MODEL_REPS], tm[MODEL_REPS], ratio[MODEL_REPS];
  long long rows = 0;
  int failed = 0;
  for (int r = 0; r < reps; r++) {
    // which goes first, and which mjData each steps, alternate with the repetition (an A/A run,
    // mj_step on both sides, then reads 1 to within the spread)
    mjData *dc = r % 4 < 2 ? a : b, *dm = r % 4 < 2 ? b : a;
    for (int turn = 0; turn < 2; turn++) {
      double t0;
      if ((turn + r) % 2 == 0) {
        mj_copyData(dc, m, start);
        t0 = now();
        for (int k = 0; k < K; k++) {
          failed |= plugin ? chainfd_step(m, dc) : chainfd_stepper_step(s, m, dc);
          rows += dc->nefc;
        }
        tc[r] = (now() - t0) / K;
      } else {
        mj_copyData(dm, m, start);
        t0 = now();
        for (int k = 0; k < K; k++) mj_step(m, dm);
        tm[r] = (now() - t0) / K;
      }
    }
    ratio[r] = tm[r] / tc[r];  // each repetition's pair, run back to back: drift cancels
  }
  chainfd_stats st;
  if (plugin) chainfd_get_stats(m, a, &st);
  else chainfd_stepper_stats(s, &st);
  double dq = 0;
  for (int i = 0; i < m->nq; i++) dq = fmax(dq, fabs(a->qpos[i] - b->qpos[i]));
  double c = cfd_median(tc, reps), j = cfd_median(tm, reps);
  printf("%s %s step_us=%.4g mj_step_us=%.4g ratio=%.3f nefc=%.1f\n", path, st.backend, c * 1e6,
         j * 1e6, cfd_median(ratio, reps), (double)rows / ((double)reps * K));
  // where chainfd's step goes: MuJoCo's own stages before qacc (collision and the rows among them)
  printf("  (MuJoCo's stages in each chainfd_step, rows included: %.4g us at the start state)\n",
         time_stages(m, b, start));
  printf("  (%s; steps by chainfd %lld, by MuJoCo %lld%s%s; |dqpos| after %d steps %.1e)\n",
         plugin ? "chainfd_step through the plugin" : backend ? "a stepper" : "a stepper, default configuration",
         st.steps_chainfd, st.steps_mujoco, st.last_fallback[0] ? ": " : "", st.last_fallback,
         K, dq);
  if (failed) printf("  (chainfd_step returned an error: %s)\n", chainfd_last_error());
  chainfd_stepper_free(s);
  mj_deleteData(start); mj_deleteData(a); mj_deleteData(b);
  mj_deleteModel(m);
  return failed;
}

int main(int argc, char** argv) {
  int steps = 200, nmodels = 0, steps_given = 0, reps = MODEL_REPS, settle = 0;
  const char *json_path = NULL, *backend = NULL;
  const char** model_paths = calloc((size_t)argc, sizeof(char*));
  if (!model_paths) return 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
      if (cfd_arg_int("chainfd-bench-step", "--steps", argv[++i], 1, 100000000, &steps)) return 2;
      steps_given = 1;
    } else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!strcmp(argv[i], "--model") && i + 1 < argc) model_paths[nmodels++] = argv[++i];
    else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      if (cfd_arg_int("chainfd-bench-step", "--reps", argv[++i], 1, MODEL_REPS, &reps)) return 2;
    } else if (!strcmp(argv[i], "--settle") && i + 1 < argc) {
      if (cfd_arg_int("chainfd-bench-step", "--settle", argv[++i], 0, 100000000, &settle)) return 2;
    } else {
      fprintf(stderr, "usage: chainfd-bench-step [--steps K] [--json FILE] [--model FILE ... "
                      "[--backend NAME] [--reps R] [--settle N]]\n");
      return 2;
    }
  }
  if (nmodels) {
    int failed = 0;
    for (int k = 0; k < nmodels; k++)
      failed |= bench_model(model_paths[k], steps_given ? steps : 500, backend, reps, settle);
    free(model_paths);
    return failed;
  }
  free(model_paths);
  // the issues' sizes, and around the GPU split's limit (256 links) for backend=auto's step table
  static const char* models[] = {CHAINFD_SCENES_DIR "/arm7.xml",
                                 "chain:50,random=1,seed=1,damping=0.5,armature=0.05",
                                 "chain:100,random=1,seed=1,damping=0.5,armature=0.05",
                                 "chain:200,random=1,seed=1,damping=0.5,armature=0.05",
                                 "chain:256,random=1,seed=1,damping=0.5,armature=0.05",
                                 "chain:300,random=1,seed=1,damping=0.5,armature=0.05",
                                 "chain:500,random=1,seed=1,damping=0.5,armature=0.05",
                                 "chain:1000,random=1,seed=1,damping=0.5,armature=0.05"};
  static const char* backends[] = {"cpu.fast", "cpu.abia", "cpu.cfa", "cuda.abia", "cuda.jsiia",
                                   "cuda.cfa"};
  int gpus = cfd_gpu_device_count();
  FILE* json = json_path ? fopen(json_path, "w") : NULL;
  if (json_path && !json) {
    fprintf(stderr, "chainfd-bench-step: cannot write %s\n", json_path);
    return 1;
  }
  if (json) fprintf(json, "{\"mujoco\": \"%s\", \"results\": [\n", mj_versionString());
  int first = 1;
  printf("chainfd_step against mj_step (Euler, implicit damping), median us per step over %d steps\n",
         steps);
  for (size_t k = 0; k < sizeof(models) / sizeof(models[0]); k++) {
    char err[1024];
    mjModel* m = cfd_load_model(models[k], err, sizeof err);
    if (!m) { fprintf(stderr, "%s: %s\n", models[k], err); continue; }
    m->opt.disableflags |= mjDSBL_CONSTRAINT;
    mjData* start = mj_makeData(m);
    mjData* d = mj_makeData(m);
    cfd_rng rng = {3};
    cfd_random_state(m, start, &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL);
    double* ref = malloc(sizeof(double) * m->nq);
    double* got = malloc(sizeof(double) * m->nq);
    int K = m->nv >= 500 ? steps / 10 + 1 : steps;  // mj_step is O(n^3) here
    double t_mj = time_steps(m, d, start, NULL, K, ref);
    printf("\n%s (n=%d)\n  mj_step      %12.2f us   (MuJoCo's stages that chainfd_step runs: %.1f us)\n",
           models[k], (int)m->nv, t_mj * 1e6, time_stages(m, d, start));
    for (size_t b = 0; b < sizeof(backends) / sizeof(backends[0]); b++) {
      if (!strncmp(backends[b], "cuda.", 5) && gpus == 0) continue;
      chainfd_config cfg = {backends[b], NULL, strncmp(backends[b], "cuda.", 5) ? "cpu" : "0", "error"};
      chainfd_stepper* s = chainfd_stepper_create(m, &cfg, "bench", err, sizeof err);
      if (!s) { printf("  %-10s   %s\n", backends[b], err); continue; }
      double t = time_steps(m, d, start, s, K, got);
      double dq = 0;
      for (int i = 0; i < m->nq; i++) dq = fmax(dq, fabs(got[i] - ref[i]));
      const char* e = chainfd_last_error();
      printf("  %-10s   %12.2f us   x%-8.3g |dqpos| after %d steps %.1e%s%s\n", backends[b], t * 1e6,
             t_mj / t, K, dq, e && e[0] ? "  " : "", e && e[0] ? e : "");
      if (json)
        fprintf(json, "%s  {\"model\": \"%s\", \"n\": %d, \"backend\": \"%s\", \"us\": %.6g, "
                      "\"mj_step_us\": %.6g, \"ratio\": %.4g, \"dqpos\": %.3g}",
                first ? "" : ",\n", models[k], (int)m->nv, backends[b], t * 1e6, t_mj * 1e6,
                t_mj / t, dq);
      first = 0;
      chainfd_stepper_free(s);
      if (!strncmp(backends[b], "cuda.", 5) && m->nv >= 50) profile_gpu(m, start, backends[b]);
      if (!strcmp(backends[b], "cuda.abia") && m->nv <= 256) {  // its split kernel launched per call
        cfd_gpu_tuning relaunch = {.split_relaunch = 1};
        s = chainfd_stepper_create(m, &cfg, "bench", err, sizeof err);
        if (s && cfd_stepper_set_gpu_tuning(s, &relaunch, err, sizeof err) == 0) {
          double t1 = time_steps(m, d, start, s, K, got);
          printf("  %-10s   %12.2f us   x%-8.3g (its split kernel launched at each call, not resident)\n",
                 backends[b], t1 * 1e6, t_mj / t1);
        }
        chainfd_stepper_free(s);
      }
    }
    free(ref); free(got);
    mj_deleteData(d); mj_deleteData(start);
    mj_deleteModel(m);
  }
  if (json) {
    fprintf(json, "\n]}\n");
    fclose(json);
  }
  return 0;
}
