// chainfd-cfa-accuracy: how far the CPU CFA (kernels/cpu/cfa_cpu.c) is from the long-double
// reference (cfd_fd_reference) on long random chains, raw and after k refinement steps, with the
// refinement's residual tau - ID(q, qd, qdd) in double and in long double (cfd_cfa_residual_ld).
// The question it answers: what stops CFA on long chains, the residual's rounding or the solve's?
// If the residual were the limit, the long-double rows would go on converging where the double
// rows stall. Chains past 1000 links repeat the links of chain:1000,random=1,seed=1 (as the GPU
// benchmark's), with random q, qd, tau in the chain's own coordinates.
//
//   chainfd-cfa-accuracy [--sizes 1000,2048,4096,8192,16384] [--seed 42]
//
// Errors are max_i |qacc_i - ref_i| / max_i |ref_i|; "st" is the back end's status (0, or
// CFD_ERR_INACCURATE when the refinement did not converge: qacc is still the last iterate).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mujoco/mujoco.h>

#include "cfd_math.h"
#include "chain.h"
#include "chain_gen.h"
#include "mj_chain.h"
#include "mj_random.h"

int main(int argc, char** argv) {
  const char* sizes = "1000,2048,4096,8192,16384";
  unsigned long long seed = 42;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes = argv[++i];
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
    else {
      fprintf(stderr, "usage: %s [--sizes N,N,...] [--seed S]\n", argv[0]);
      return 2;
    }
  }
  char err[1024];
  mjModel* m = cfd_load_model("chain:1000,random=1,seed=1,armature=0.01", err, sizeof err);
  cfd_chain base;
  if (!m || cfd_chain_from_model(m, &base, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  mj_deleteModel(m);
  printf("CFA (cpu.cfa) against the long-double reference; max |error| / max |qacc|\n");
  printf("%6s %10s %10s  %-9s %s\n", "n", "cpu.fast", "CFA raw", "residual",
         "after 1, 2, 4, 8 refinement steps (status)");
  const int steps[4] = {1, 2, 4, 8};
  for (const char* p = sizes; *p;) {
    int n = atoi(p);
    while (*p && *p != ',') p++;
    if (*p == ',') p++;
    if (n < 2) continue;
    cfd_chain c;
    if (cfd_chain_tile(&base, n, &c)) return 1;
    double* v = malloc(sizeof(double) * 6 * n);
    double* w = malloc(sizeof(double) * (cfd_cfa_work_size(n) + cfd_fast_work_size(n)));
    if (!v || !w) return 1;
    double *q = v, *qd = q + n, *tau = qd + n, *ref = tau + n, *x = ref + n, *fast = x + n;
    cfd_rng rng = {seed};
    for (int i = 0; i < n; i++) {
      q[i] = cfd_rng_uniform(&rng, -3.14, 3.14);
      qd[i] = cfd_rng_uniform(&rng, -2, 2);
      tau[i] = cfd_rng_uniform(&rng, -1, 1);
    }
    if (cfd_fd_reference(&c, q, qd, tau, NULL, ref) || cfd_fd_fast_cpu(&c, q, qd, tau, NULL, fast, w))
      return 1;
    cfd_cfa_refine_steps = 0;
    int st = cfd_fd_cfa_cpu(&c, q, qd, tau, NULL, x, w);
    double raw = cfd_rel_err_inf(x, ref, n);
    for (int ld = 0; ld < 2; ld++) {
      if (ld) printf("%6s %10s %10s", "", "", "");
      else printf("%6d %10.2e %10.2e", n, cfd_rel_err_inf(fast, ref, n), raw);
      printf("  %-9s", ld ? "long dbl" : "double");
      cfd_cfa_residual_ld = ld;
      for (int k = 0; k < 4; k++) {
        cfd_cfa_refine_steps = steps[k];
        st = cfd_fd_cfa_cpu(&c, q, qd, tau, NULL, x, w);
        printf(" %9.2e (%d)", cfd_rel_err_inf(x, ref, n), st);
      }
      printf("\n");
    }
    cfd_cfa_residual_ld = 0;
    cfd_cfa_refine_steps = 4;
    free(v);
    free(w);
    cfd_chain_free(&c);
  }
  cfd_chain_free(&base);
  return 0;
}
