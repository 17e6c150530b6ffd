// The batched forward-dynamics APIs a caller holds: chainfd_fd (include/chainfd_fd.h, MuJoCo's
// qpos/qvel and total joint force in, qacc out) against mj_forward's qacc on every back end, for
// B in {1, 7, 1000}; its errors (qacc untouched). --gpu (label gpu; exit 77, SKIPPED, without a
// CUDA device): the cuda.* back ends through chainfd_fd, and cfd_gpu_fd and chainfd_rollout_run
// with device arrays (CFD_DEVICE) against the same calls with host arrays: the same kernels, so
// the same bits.
#include <stdlib.h>

#include "backend.h"
#include "chain_gen.h"
#include "gpu.h"
#include "chainfd_fd.h"
#include "chainfd_rollout.h"
#include "mj_chain.h"
#include "mj_random.h"
#include "test_util.h"
#ifdef CHAINFD_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

// tol: against mj_forward's qacc, state by state. At 200 links MuJoCo's own qacc is up to 1.3e-10
// from the high-precision reference on these 1000 random states (every back end measures 1.35e-10
// against it there, the same state: MuJoCo's rounding, not theirs; `chainfd check` and test_oracle
// hold the back ends to the reference itself).
static const struct { const char* spec; double tol; } models[] = {
    {CHAINFD_SCENES_DIR "/arm7.xml", 1e-10},
    {CHAINFD_SCENES_DIR "/slide_hinge.xml", 1e-10},
    {"chain:200,random=1,seed=61,slide=0.2,damping=0.1,armature=0.01,actuators=1", 1e-9},
};

// B random states of m with their total joint force and MuJoCo's qacc ([B][nq], [B][nv] x 3)
static void mujoco_states(const mjModel* m, int B, unsigned long long seed, double* qpos,
                          double* qvel, double* qfrc, double* qacc) {
  mjData* d = mj_makeData(m);
  cfd_rng rng = {seed};
  for (int b = 0; b < B; b++) {
    cfd_random_state(m, d, &rng, CFD_RANDOM_ALL);
    mj_forward(m, d);
    int nv = m->nv;
    memcpy(qpos + (size_t)b * m->nq, d->qpos, sizeof(double) * m->nq);
    memcpy(qvel + (size_t)b * nv, d->qvel, sizeof(double) * nv);
    for (int i = 0; i < nv; i++)  // xfrc_applied reaches qacc through qfrc_smooth only
      qfrc[(size_t)b * nv + i] = d->qfrc_smooth[i] + d->qfrc_bias[i];
    memcpy(qacc + (size_t)b * nv, d->qacc, sizeof(double) * nv);
  }
  mj_deleteData(d);
}

// worst relative error of got against ref, state by state
static double worst_state_err(const double* got, const double* ref, int B, int nv) {
  double worst = 0;
  for (int b = 0; b < B; b++) {
    double e = cfd_rel_err_inf(got + (size_t)b * nv, ref + (size_t)b * nv, nv);
    worst = cfd_worst(worst, e);
  }
  return worst;
}

static void test_fd(const char* spec, double tol, int gpu) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  EXPECT(m != NULL, "%s: %s", spec, err);
  if (!m) return;
  m->opt.disableflags |= mjDSBL_CONSTRAINT;
  int nq = m->nq, nv = m->nv, Bmax = 1000;
  double* qpos = malloc(sizeof(double) * Bmax * nq);
  double* qvel = malloc(sizeof(double) * Bmax * nv);
  double* qfrc = malloc(sizeof(double) * Bmax * nv);
  double* ref = malloc(sizeof(double) * Bmax * nv);
  double* got = malloc(sizeof(double) * Bmax * nv);
  mujoco_states(m, Bmax, 7, qpos, qvel, qfrc, ref);
  // the back ends of this mode, then auto (picked for the batch of 1000)
  const char* names[8];
  int count = 0;
  for (int b = 0; b < cfd_backend_count(); b++)
    if ((cfd_backend_get(b)->gpu_algorithm >= 0) == gpu) names[count++] = cfd_backend_get(b)->name;
  names[count++] = "auto";
  for (int k = 0; k < count; k++) {
    chainfd_fd* f;
    int st = chainfd_fd_create(m, names[k], gpu ? 0 : CHAINFD_CPU, 1000, &f, err, sizeof err);
    // the one refusal: CFA on a link with a singular inertia (slide_hinge's wrist)
    int cfa = strstr(names[k], ".cfa") != NULL;
    if (st && cfa && strstr(spec, "slide_hinge") && strstr(err, "singular") &&
        strstr(err, "'h_wx'") && strstr(err, "'wrist'")) {
      printf("%-40.40s %-10s refused: %s\n", spec, names[k], err);
      continue;
    }
    EXPECT(st == 0, "%s %s: %s", spec, names[k], err);
    if (st) continue;
    EXPECT(gpu || !strncmp(chainfd_fd_backend(f), "cpu.", 4), "%s: auto on the CPU picked %s",
           spec, chainfd_fd_backend(f));
    static const int batches[3] = {1, 7, 1000};
    for (int j = 0; j < 3; j++) {
      int B = batches[j];
      for (int i = 0; i < B * nv; i++) got[i] = NAN;
      st = chainfd_fd_run(f, B, qpos, qvel, qfrc, got, err, sizeof err);
      EXPECT(st == 0, "%s %s B=%d: %s", spec, names[k], B, err);
      double e = worst_state_err(got, ref, B, nv);
      printf("%-40.40s %-10s (%s) B=%-4d against mj_forward %.2e\n", spec, names[k],
             chainfd_fd_backend(f), B, e);
      EXPECT(e <= tol, "%s %s B=%d: %.3e", spec, names[k], B, e);
    }
    // errors: a NaN in one state and a batch of none, named; qacc untouched
    double saved = qvel[3 * nv + 1];
    qvel[3 * nv + 1] = NAN;
    for (int i = 0; i < 7 * nv; i++) got[i] = 5;
    st = chainfd_fd_run(f, 7, qpos, qvel, qfrc, got, err, sizeof err);
    qvel[3 * nv + 1] = saved;
    int untouched = 1;
    for (int i = 0; i < 7 * nv; i++) untouched &= got[i] == 5;
    EXPECT(st != 0 && strstr(err, "state 3") && strstr(err, "qvel[1]") && untouched,
           "%s %s: a NaN qvel: status %d (%s), qacc %s", spec, names[k], st, err,
           untouched ? "untouched" : "written");
    EXPECT(chainfd_fd_run(f, 0, qpos, qvel, qfrc, got, err, sizeof err) != 0 && strstr(err, "0"),
           "%s %s: B = 0 accepted", spec, names[k]);
    chainfd_fd_free(f);
  }
  free(qpos); free(qvel); free(qfrc); free(ref); free(got);
  mj_deleteModel(m);
}

static void test_fd_errors(int gpu) {
  char err[1024];
  mjModel* m = cfd_load_model(CHAINFD_SCENES_DIR "/arm7.xml", err, sizeof err);
  if (!m) return;
  chainfd_fd* f = (chainfd_fd*)1;
  EXPECT(chainfd_fd_create(m, "cuda.nothing", 0, 1, &f, err, sizeof err) != 0 && f == NULL &&
         strstr(err, "cuda.nothing"), "an unknown back end: %s", err);
  printf("unknown back end: %s\n", err);
  if (gpu) {
    EXPECT(chainfd_fd_create(m, "cuda.abia", 99, 1, &f, err, sizeof err) != 0 && f == NULL &&
           strstr(err, "99"), "device 99: %s", err);
    printf("device 99: %s\n", err);
  }
  mj_deleteModel(m);
}

#ifdef CHAINFD_HAVE_CUDA
// cfd_gpu_fd on device arrays against host arrays, every algorithm; chainfd_rollout_run the same
static void test_device_arrays(const char* spec) {
  char err[1024];
  mjModel* m = cfd_load_model(spec, err, sizeof err);
  EXPECT(m != NULL, "%s: %s", spec, err);
  if (!m) return;
  cfd_chain c;
  EXPECT(cfd_chain_from_model(m, &c, err, sizeof err) == 0, "%s: %s", spec, err);
  int n = c.n, B = 1000;
  size_t bn = (size_t)B * n, bytes = sizeof(double) * bn;
  double* h = malloc(bytes * 6);  // q qd tau extra | host-array qacc | device-array qacc
  cfd_rng rng = {5};
  for (size_t k = 0; k < 4 * bn; k++) h[k] = cfd_rng_uniform(&rng, -1, 1);
  for (size_t k = 3 * bn; k < 4 * bn; k++) h[k] = 0.05 * (h[k] + 1);  // a diagonal >= 0
  double* d = NULL;
  EXPECT(cudaMalloc((void**)&d, bytes * 5) == cudaSuccess, "cudaMalloc");
  EXPECT(cudaMemcpy(d, h, bytes * 4, cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy");
  for (int alg = 0; alg < 4 && d; alg++) {
    cfd_gpu* g;
    int st = cfd_gpu_create(&c, 0, (cfd_gpu_algorithm)alg, &g, err, sizeof err);
    if (st && alg == CFD_GPU_CFA && strstr(err, "singular")) continue;  // slide_hinge's wrist
    EXPECT(st == 0, "%s %s: %s", spec, cfd_gpu_algorithm_name(alg), err);
    if (st) continue;
    for (int with_extra = 0; with_extra < 2; with_extra++) {
      const double* ex = with_extra ? h + 3 * bn : NULL;
      const double* dex = with_extra ? d + 3 * bn : NULL;
      double *host_out = h + 4 * bn, *dev_out = h + 5 * bn;
      for (size_t k = 0; k < 2 * bn; k++) host_out[k] = NAN;
      cudaMemset(d + 4 * bn, 0xff, bytes);  // NaN where nothing is written
      st = cfd_gpu_fd(g, B, h, h + bn, h + 2 * bn, ex, host_out, CFD_HOST, err, sizeof err);
      EXPECT(st == 0, "%s %s host arrays: %s", spec, cfd_gpu_algorithm_name(alg), err);
      st = cfd_gpu_fd(g, B, d, d + bn, d + 2 * bn, dex, d + 4 * bn, CFD_DEVICE, err, sizeof err);
      EXPECT(st == 0, "%s %s device arrays: %s", spec, cfd_gpu_algorithm_name(alg), err);
      EXPECT(cudaMemcpy(dev_out, d + 4 * bn, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "copy");
      int same = !memcmp(host_out, dev_out, bytes);
      printf("%-40.40s %-10s B=%d diag=%d device arrays: %s\n", spec, cfd_gpu_algorithm_name(alg),
             B, with_extra, same ? "the same bits" : "DIFFERENT");
      EXPECT(same, "%s %s diag=%d: device arrays give %.3e from host arrays", spec,
             cfd_gpu_algorithm_name(alg), with_extra, max_abs_diff(host_out, dev_out, bn));
    }
    cfd_gpu_free(g);
  }
  cudaFree(d);
  free(h);
  cfd_chain_free(&c);

  // the rollout: starts and controls on the device, its trajectories written there
  chainfd_rollout* r;
  EXPECT(chainfd_rollout_create(m, 0, &r, err, sizeof err) == 0, "%s rollout: %s", spec, err);
  int nu = m->nu, H = 20, nx = 2 * m->nv, R = 33;
  size_t init_n = (size_t)R * nx, ctrl_n = (size_t)R * H * (nu ? nu : 1), out_n = (size_t)R * (H + 1) * nx;
  double* hr = malloc(sizeof(double) * (init_n + ctrl_n + 2 * out_n));
  double *hinit = hr, *hctrl = hr + init_n, *hout = hctrl + ctrl_n, *dout_h = hout + out_n;
  mjData* md = mj_makeData(m);
  for (int b = 0; b < R; b++) {
    cfd_random_state(m, md, &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL);
    chainfd_rollout_get_state(m, md, hinit + (size_t)b * nx);
  }
  mj_deleteData(md);
  for (size_t k = 0; k < ctrl_n; k++) hctrl[k] = cfd_rng_uniform(&rng, -1, 1);
  double* dr = NULL;
  EXPECT(cudaMalloc((void**)&dr, sizeof(double) * (init_n + ctrl_n + out_n)) == cudaSuccess, "cudaMalloc");
  if (r && dr) {
    cudaMemcpy(dr, hinit, sizeof(double) * (init_n + ctrl_n), cudaMemcpyHostToDevice);
    cudaMemset(dr + init_n + ctrl_n, 0xff, sizeof(double) * out_n);
    int st = chainfd_rollout_run(r, R, H, hinit, 0, hctrl, hout, 0, CHAINFD_HOST, err, sizeof err);
    EXPECT(st == 0, "%s rollout, host arrays: %s", spec, err);
    st = chainfd_rollout_run(r, R, H, dr, 0, dr + init_n, dr + init_n + ctrl_n, 0, CHAINFD_DEVICE, err,
                             sizeof err);
    EXPECT(st == 0, "%s rollout, device arrays: %s", spec, err);
    cudaMemcpy(dout_h, dr + init_n + ctrl_n, sizeof(double) * out_n, cudaMemcpyDeviceToHost);
    int same = !memcmp(hout, dout_h, sizeof(double) * out_n);
    printf("%-40.40s rollout B=%d H=%d device arrays: %s\n", spec, R, H,
           same ? "the same bits" : "DIFFERENT");
    EXPECT(same, "%s rollout: device arrays differ from host arrays", spec);
  }
  cudaFree(dr);
  free(hr);
  chainfd_rollout_free(r);
  mj_deleteModel(m);
}
#endif

int main(int argc, char** argv) {
  int gpu = argc > 1 && !strcmp(argv[1], "--gpu");
  if (gpu && cfd_gpu_device_count() == 0) {
    printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) test_fd(models[i].spec, models[i].tol, gpu);
  test_fd_errors(gpu);
#ifdef CHAINFD_HAVE_CUDA
  if (gpu)
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) test_device_arrays(models[i].spec);
#endif
  TEST_EXIT();
}
