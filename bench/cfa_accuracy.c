// chainfd-cfa-accuracy: how far the CPU CFA (kernels/cpu/cfa_cpu.c) is from the long-double
// reference (cfd_fd_reference) on long random chains, raw and after k refinement steps, with the
// refinement's residual tau - ID(q, qd, qdd) in double and in long double (cfd_cfa_options.residual_ld).
// The question it answers: what stops CFA on long chains, the residual's rounding or the solve's?
// If the residual were the limit, the long-double rows would go on converging where the double
// rows stall. Chains past 1000 links repeat the links of chain:1000,random=1,seed=1 (as the GPU
// benchmark's), with random q, qd, tau in the chain's own coordinates.
//
//   chainfd-cfa-accuracy [--sizes 1000,2048,4096,8192,16384] [--seed 42]
//   chainfd-cfa-accuracy --probe STATES [--sizes ...] [--gpu]
//
// --probe: the acceptance test itself. For STATES random states at each size (state s on a chain
// tiled from random 1000-link chain s: the same STATES base chains at every size), the default
// CFA's status and its true error; it reports the worst error CFA accepted and the best it
// refused, and says where it accepted none (a rule that refuses everything keeps its promise
// vacuously). CFA promises never to accept above 1e-8 (cfd_cfa_converged); the exit status is 1
// when it did. --gpu: cuda.cfa on device 0 as well, on the same states (its residuals and
// eliminations round otherwise; the acceptance rule is the same, kernels/cfa_blocks.h).
//
// Errors are max_i |qacc_i - ref_i| / max_i |ref_i|; "st" is the back end's status (0, or
// CFD_ERR_INACCURATE when the refinement did not converge: qacc is still the last iterate).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mujoco/mujoco.h>

#include "../cli/args.h"  // strict numeric options, shared with the chainfd tool
#include "cfd_math.h"
#include "chain.h"
#include "chain_gen.h"
#include "gpu.h"
#include "mj_chain.h"
#include "mj_random.h"

#define NEED(p) cfd_need("chainfd-cfa-accuracy", (p))
#define MAX_SIZE 1000000  // links of one tiled chain

// 0 when every entry of the --sizes list is a whole number from 2 to MAX_SIZE (the loops below
// then read them with atoi); 1 after saying which is not.
static int check_sizes(const char* sizes) {
  char buf[32];
  const char* p = sizes;
  do {
    size_t len = strcspn(p, ",");
    int n;
    snprintf(buf, sizeof buf, "%.*s", len < sizeof buf ? (int)len : (int)sizeof buf - 1, p);
    if (len >= sizeof buf || cfd_arg_int("chainfd-cfa-accuracy", "--sizes", buf, 2, MAX_SIZE, &n))
      return 1;
    p += len;
  } while (*p++ == ',');
  return 0;
}

// A random state in the chain's own coordinates: q, qd, tau uniform in [-3.14, 3.14], [-2, 2], [-1, 1].
static void random_state(unsigned long long seed, int n, double* q, double* qd, double* tau) {
  cfd_rng rng = {seed};
  for (int i = 0; i < n; i++) {
    q[i] = cfd_rng_uniform(&rng, -3.14, 3.14);
    qd[i] = cfd_rng_uniform(&rng, -2, 2);
    tau[i] = cfd_rng_uniform(&rng, -1, 1);
  }
}

// The acceptance probe (--probe): per size, states on chains of their own.
static int probe(const char* sizes, int states, unsigned long long seed, int gpu, int verbose) {
  printf("CFA acceptance (cpu.cfa%s, %d refinement steps) against the long-double reference\n",
         gpu ? " and cuda.cfa" : "", CFD_CFA_REFINE_STEPS);
  printf("%6s %7s %8s %8s %12s %12s %12s %12s", "n", "states", "accepted", "refused", "worst acc.",
         "best refused", "fast, same", "fast, all");
  if (gpu) printf(" %12s %12s", "GPU accepted", "GPU worst");
  printf("\n");
  double worst_all = 0;
  for (const char* p = sizes; *p;) {
    int n = atoi(p);
    while (*p && *p != ',') p++;
    if (*p == ',') p++;
    if (n < 2) continue;
    int accepted = 0, refused = 0;
    double worst = 0, best_refused = INFINITY;
    double fast_accepted = 0, fast_all = 0;  // cpu.fast's worst on the states CFA accepted; on all
    int gpu_accepted = 0;
    double gpu_worst = 0;
    for (int s = 0; s < states; s++) {
      char spec[128], err[1024];
      snprintf(spec, sizeof spec, "chain:1000,random=1,seed=%llu,armature=0.01", seed + 7919ull * s);
      mjModel* m = cfd_load_model(spec, err, sizeof err);
      cfd_chain base, c;
      if (!m || cfd_chain_from_model(m, &base, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
      }
      mj_deleteModel(m);
      if (cfd_chain_tile(&base, n, &c)) return 2;
      double* v = NEED(malloc(sizeof(double) * 6 * n));
      double* w = NEED(malloc(sizeof(double) * (cfd_cfa_work_size(n) + cfd_fast_work_size(n))));
      if (!v || !w) return 2;
      double *q = v, *qd = q + n, *tau = qd + n, *ref = tau + n, *x = ref + n, *fast = x + n;
      random_state(seed * 31 + (unsigned long long)n * 1000003ull + (unsigned long long)s, n, q, qd,
                   tau);
      if (cfd_fd_reference(&c, q, qd, tau, NULL, ref) || cfd_fd_fast_cpu(&c, q, qd, tau, NULL, fast, w))
        return 2;
      double e_fast = cfd_rel_err_inf(fast, ref, n);
      fast_all = cfd_worst(fast_all, e_fast);
      int st = cfd_fd_cfa_cpu(&c, q, qd, tau, NULL, x, w);
      double e = cfd_rel_err_inf(x, ref, n);
      if (st == CFD_OK) {
        accepted++;
        worst = cfd_worst(worst, e);
        fast_accepted = cfd_worst(fast_accepted, e_fast);
      } else if (st == CFD_ERR_INACCURATE || st == CFD_ERR_SINGULAR) {
        refused++;
        if (st == CFD_ERR_INACCURATE && e < best_refused) best_refused = e;
      } else {
        fprintf(stderr, "n=%d state %d: status %d\n", n, s, st);
        return 2;
      }
      if (gpu) {  // the same state through cuda.cfa
        cfd_gpu* g = NULL;
        int gst = CFD_ERR_INACCURATE;  // past CFD_GPU_CFA_MAX_N links: refused by create
        if (n <= CFD_GPU_CFA_MAX_N) {
          if (cfd_gpu_create(&c, 0, CFD_GPU_CFA, &g, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 2;
          }
          gst = cfd_gpu_fd(g, 1, q, qd, tau, NULL, x, CFD_HOST, err, sizeof err);
          cfd_gpu_free(g);
        }
        if (verbose)
          printf("  n=%d state %d: cpu.cfa %s %.2e, cuda.cfa %s %.2e, cpu.fast %.2e\n", n, s,
                 st ? "refused" : "accepted", e, gst ? "refused" : "accepted",
                 gst ? 0.0 : cfd_rel_err_inf(x, ref, n), e_fast);
        if (gst == CFD_OK) {
          gpu_accepted++;
          gpu_worst = cfd_worst(gpu_worst, cfd_rel_err_inf(x, ref, n));
        } else if (gst != CFD_ERR_INACCURATE && gst != CFD_ERR_SINGULAR) {
          fprintf(stderr, "n=%d state %d: cuda.cfa: %s\n", n, s, err);
          return 2;
        }
      }
      free(v);
      free(w);
      cfd_chain_free(&c);
      cfd_chain_free(&base);
    }
    printf("%6d %7d %8d %8d %12.2e %12.2e %12.2e %12.2e", n, states, accepted, refused, worst,
           best_refused, fast_accepted, fast_all);
    if (gpu) printf(" %12d %12.2e", gpu_accepted, gpu_worst);
    printf("%s\n", accepted || gpu_accepted ? "" : "  (none accepted)");
    fflush(stdout);
    worst_all = cfd_worst(cfd_worst(worst_all, worst), gpu_worst);
  }
  int ok = worst_all <= 1e-8;
  printf("worst accepted %.2e: %s\n", worst_all, ok ? "within 1e-8" : "ABOVE 1e-8");
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  const char* sizes = "1000,2048,4096,8192,16384";
  unsigned long long seed = 42;
  int probe_states = 0, gpu = 0, verbose = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes = argv[++i];
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
      if (cfd_arg_u64("chainfd-cfa-accuracy", "--seed", argv[++i], &seed)) return 2;
    }
    else if (!strcmp(argv[i], "--gpu")) gpu = 1;
    else if (!strcmp(argv[i], "--verbose")) verbose = 1;
    else if (!strcmp(argv[i], "--probe") && i + 1 < argc) {
      if (cfd_arg_int("chainfd-cfa-accuracy", "--probe", argv[++i], 1, 1000000, &probe_states))
        return 2;
    }
    else {
      fprintf(stderr, "usage: %s [--sizes N,N,...] [--seed S] [--probe STATES [--gpu] [--verbose]]\n", argv[0]);
      return 2;
    }
  }
  if (check_sizes(sizes)) return 2;
  if (gpu && (!probe_states || cfd_gpu_device_count() < 1)) {
    fprintf(stderr, "--gpu: %s\n", probe_states ? "no CUDA device" : "only with --probe");
    return 2;
  }
  if (probe_states > 0) return probe(sizes, probe_states, seed, gpu, verbose);
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
    double* v = NEED(malloc(sizeof(double) * 6 * n));
    double* w = NEED(malloc(sizeof(double) * (cfd_cfa_work_size(n) + cfd_fast_work_size(n))));
    double *q = v, *qd = q + n, *tau = qd + n, *ref = tau + n, *x = ref + n, *fast = x + n;
    random_state(seed, n, q, qd, tau);
    if (cfd_fd_reference(&c, q, qd, tau, NULL, ref) || cfd_fd_fast_cpu(&c, q, qd, tau, NULL, fast, w))
      return 1;
    const cfd_cfa_options raw_opt = {.refine_steps = -1};
    int st = cfd_fd_cfa_cpu_ex(&c, &raw_opt, q, qd, tau, NULL, x, w);
    double raw = cfd_rel_err_inf(x, ref, n);
    for (int ld = 0; ld < 2; ld++) {
      if (ld) printf("%6s %10s %10s", "", "", "");
      else printf("%6d %10.2e %10.2e", n, cfd_rel_err_inf(fast, ref, n), raw);
      printf("  %-9s", ld ? "long dbl" : "double");
      for (int k = 0; k < 4; k++) {
        const cfd_cfa_options opt = {.refine_steps = steps[k], .residual_ld = ld};
        st = cfd_fd_cfa_cpu_ex(&c, &opt, q, qd, tau, NULL, x, w);
        printf(" %9.2e (%d)", cfd_rel_err_inf(x, ref, n), st);
      }
      printf("\n");
    }
    free(v);
    free(w);
    cfd_chain_free(&c);
  }
  cfd_chain_free(&base);
  return 0;
}
