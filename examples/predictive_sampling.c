// Predictive sampling on the 7-dof arm: sample B control sequences around a nominal, roll them all
// out with chainfd_rollout (GPU when there is one, else the CPU), keep the best as the new nominal,
// apply its first knot to the simulated arm (mj_step), shift, repeat. Prints the cost falling.
// Controls are knots held for KNOT physics steps, so a horizon covers a useful stretch of time.
//
//   build/examples/predictive_sampling [scenes/arm7.xml] [--iters N] [--samples B] [--cpu]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chainfd_rollout.h"

// uniform in [lo, hi) from a 64-bit xorshift state (the example's own: it uses the public API only)
static double uniform(unsigned long long* s, double lo, double hi) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return lo + (hi - lo) * (double)(*s >> 11) * (1.0 / 9007199254740992.0);
}

enum { KNOTS = 5, KNOT = 40, HORIZON = KNOTS * KNOT };

// tracking cost of one trajectory: joint error to the target plus a little velocity and effort
static double cost(const double* traj, const double* ctrl, const double* target, int n, int nu) {
  double c = 0;
  for (int t = 1; t <= HORIZON; t++) {
    const double* x = traj + (size_t)t * 2 * n;
    for (int i = 0; i < n; i++) {
      double e = x[i] - target[i];
      c += e * e + 0.01 * x[n + i] * x[n + i];
    }
  }
  for (int k = 0; k < HORIZON * nu; k++) c += 1e-4 * ctrl[k] * ctrl[k];
  return c / HORIZON;
}

int main(int argc, char** argv) {
  const char* path = CHAINFD_SCENES_DIR "/arm7.xml";
  int iters = 60, B = 1024, device = chainfd_gpu_count() > 0 ? 0 : CHAINFD_CPU;
  for (int i = 1; i < argc; i++) {
    if ((!strcmp(argv[i], "--iters") || !strcmp(argv[i], "--samples")) && i + 1 < argc) {
      char* end = NULL;
      long v = strtol(argv[i + 1], &end, 10);
      if (end == argv[i + 1] || *end || v < 1 || v > 1000000) {
        fprintf(stderr, "%s takes a whole number from 1 to 1000000, not '%s'\n", argv[i], argv[i + 1]);
        return 2;
      }
      *(!strcmp(argv[i], "--iters") ? &iters : &B) = (int)v;
      i++;
    }
    else if (!strcmp(argv[i], "--cpu")) device = -1;
    else path = argv[i];
  }
  char err[1024];
  mjModel* m = mj_loadXML(path, NULL, err, sizeof err);
  if (!m) { fprintf(stderr, "%s\n", err); return 1; }
  chainfd_rollout* r;
  if (chainfd_rollout_create(m, device, &r, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
  int n = m->nv, nu = m->nu;
  mjData* d = mj_makeData(m);
  double* target = malloc(sizeof(double) * n);
  double* nominal = calloc((size_t)KNOTS * nu, sizeof(double));
  double* ctrl = malloc(sizeof(double) * (size_t)B * HORIZON * nu);
  double* traj = malloc(sizeof(double) * (size_t)B * (HORIZON + 1) * 2 * n);
  double* x0 = malloc(sizeof(double) * 2 * n);
  unsigned long long rng = 2024;
  for (int i = 0; i < n; i++) target[i] = m->qpos0[i] + uniform(&rng, -0.8, 0.8);
  printf("predictive sampling on %s: %d samples x %d steps (%d knots) per iteration, on %s\n",
         path, B, HORIZON, KNOTS, device >= 0 ? "the GPU" : "the CPU");
  double first_cost = 0, last_cost = 0;
  for (int it = 0; it < iters; it++) {
    chainfd_rollout_get_state(m, d, x0);
    // sample 0 is the nominal itself; the others perturb its knots (Gaussian, Box-Muller)
    for (int b = 0; b < B; b++)
      for (int k = 0; k < KNOTS * nu; k++) {
        double u1 = uniform(&rng, 1e-12, 1), u2 = uniform(&rng, 0, 1);
        double noise = b ? 0.15 * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2) : 0;
        int a = k % nu;
        double v = nominal[k] + noise;
        if (m->actuator_ctrllimited[a])
          v = fmin(fmax(v, m->actuator_ctrlrange[2 * a]), m->actuator_ctrlrange[2 * a + 1]);
        for (int s = 0; s < KNOT; s++)  // each knot held for KNOT steps
          ctrl[(size_t)b * HORIZON * nu + (size_t)((k / nu) * KNOT + s) * nu + a] = v;
      }
    if (chainfd_rollout_run(r, B, HORIZON, x0, 1, ctrl, traj, 0, CHAINFD_HOST, err, sizeof err)) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
    int best = 0;
    double best_cost = INFINITY, nominal_cost = 0;
    for (int b = 0; b < B; b++) {
      double c = cost(traj + (size_t)b * (HORIZON + 1) * 2 * n, ctrl + (size_t)b * HORIZON * nu,
                      target, n, nu);
      if (b == 0) nominal_cost = c;
      if (c < best_cost) best_cost = c, best = b;
    }
    // the best becomes the nominal: apply its first knot, shift the rest by one knot
    const double* chosen = ctrl + (size_t)best * HORIZON * nu;
    memcpy(d->ctrl, chosen, sizeof(double) * nu);
    for (int k = 0; k < KNOTS - 1; k++)
      memcpy(nominal + k * nu, chosen + (size_t)(k + 1) * KNOT * nu, sizeof(double) * nu);
    memcpy(nominal + (KNOTS - 1) * nu, chosen + (size_t)(KNOTS - 1) * KNOT * nu, sizeof(double) * nu);
    for (int s = 0; s < KNOT / 4; s++) mj_step(m, d);  // replan every quarter knot
    double err2 = 0;
    for (int i = 0; i < n; i++) err2 += (d->qpos[i] - target[i]) * (d->qpos[i] - target[i]);
    if (it == 0) first_cost = nominal_cost;
    last_cost = best_cost;
    if (it % 5 == 0 || it == iters - 1)
      printf("iter %3d  nominal cost %9.5f  best sampled %9.5f  |q - target| %.4f\n", it,
             nominal_cost, best_cost, sqrt(err2));
  }
  int reduced = last_cost < first_cost;
  printf("cost %s from %.5f to %.5f\n", reduced ? "reduced" : "NOT reduced", first_cost, last_cost);
  chainfd_rollout_free(r);
  free(target); free(nominal); free(ctrl); free(traj); free(x0);
  mj_deleteData(d);
  mj_deleteModel(m);
  return reduced ? 0 : 1;
}
