// The viewer's substeps (cfv_sim_substeps: a frame's steps through the CPU rollout) against its
// one-by-one steps (cfv_sim_step: chainfd_step with cpu.fast), from the same start: the same
// trajectory to rounding, the wave controller's controls included; and no substeps while a force
// the rollout does not model (a mouse perturbation's xfrc_applied) is applied. With --gpu the same
// for cuda.abia: the GPU rollout's substeps against chainfd_step's with cuda.abia (SKIPPED, 77,
// without a CUDA device).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "chainfd.h"
#include "sim.h"

static int failures = 0;

static void compare(const char* path, const char* backend, int frames, int per_frame) {
  char err[1024];
  cfv_sim a, b;
  mjModel* ma = cfv_load(path, err, sizeof err);
  mjModel* mb = cfv_load(path, err, sizeof err);
  if (!ma || !mb || cfv_sim_init(&a, ma, backend, -2 + 2 * (ma->nkey > 0), err, sizeof err) ||
      cfv_sim_init(&b, mb, backend, -2 + 2 * (mb->nkey > 0), err, sizeof err)) {
    printf("FAIL %s: %s\n", path, err);
    failures++;
    return;
  }
  if (strcmp(cfv_sim_name(&b), backend)) {
    printf("FAIL %s: the viewer runs %s, not %s\n", path, cfv_sim_name(&b), backend);
    failures++;
  }
  int fast = 0;
  for (int f = 0; f < frames; f++) {
    for (int k = 0; k < per_frame; k++) cfv_sim_step(&a);
    fast += cfv_sim_substeps(&b, per_frame);
  }
  double dq = 0, dv = 0, scale = 1;
  for (int i = 0; i < ma->nq; i++) dq = fmax(dq, fabs(a.d->qpos[i] - b.d->qpos[i]));
  for (int i = 0; i < ma->nv; i++) {
    dv = fmax(dv, fabs(a.d->qvel[i] - b.d->qvel[i]));
    scale = fmax(scale, fabs(a.d->qvel[i]));
  }
  int ok = fast == frames * per_frame && dq <= 1e-9 && dv <= 1e-9 * scale &&
           a.d->time == b.d->time;
  printf("%s %s %s: %d steps, %d through substeps, max |dqpos| %.2e, max |dqvel| %.2e\n",
         ok ? "ok  " : "FAIL", backend, path, frames * per_frame, fast, dq, dv);
  failures += !ok;

  // a perturbation: substeps decline and leave the state alone
  b.d->xfrc_applied[6 * (mb->nbody - 1) + 2] = 1.0;
  double before = b.d->qpos[0], t0 = b.d->time;
  int taken = cfv_sim_substeps(&b, per_frame);
  ok = taken == 0 && b.d->qpos[0] == before && b.d->time == t0;
  printf("%s %s: substeps with xfrc_applied declined\n", ok ? "ok  " : "FAIL", path);
  failures += !ok;
  cfv_sim_free(&a);
  cfv_sim_free(&b);
}

int main(int argc, char** argv) {
  int gpu = argc > 1 && !strcmp(argv[1], "--gpu");
  if (gpu && chainfd_gpu_count() == 0) {  // no device, or a build without CUDA
    printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  for (int i = 1 + gpu; i < argc; i++) compare(argv[i], gpu ? "cuda.abia" : "cpu.fast", 6, 17);
  if (argc < 2 + gpu) {
    printf("usage: substeps_check MODEL...\n");
    return 2;
  }
  printf("%s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
