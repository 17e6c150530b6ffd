// CFA ([GPUFD] eq. 9-19): the constraint force algorithm, serial reference. The derivation with
// the joint-diagonal term is in cfa_blocks.h, whose per-link steps cuda/cfa.cu runs in parallel.
//   1. bias torques by inverse dynamics, tau_d = tau - bias
//   2. per link: the blocks of P^T K P (A, B and C together), P = [W S]
//   3. right-hand side and the joint-diagonal term (armature, h*damping)
//   4. odd-even elimination of the block-tridiagonal system, ceil(log2 n) levels (Algorithm 2)
//   5. qdd_i = (S^T K F)_i / sigma_i
//   6. iterative refinement: r = tau - ID(q, qd, qdd) - D qdd, solved by steps 3-5 with the stored
//      elimination (only the right-hand side sweeps again, a small part of the first solve). The
//      elimination works on K = (I - Gamma) J^-1 (I - Gamma)^T, whose conditioning (light links,
//      long lever arms) degrades the raw CFA with the chain's length; each step multiplies the
//      error by about that much again, so on long enough chains the solve is too far off for the
//      steps to contract, whatever the residual's precision (bench/cfa_accuracy.c; the figures in
//      docs/RESULTS.md). cfd_cfa_options.refine_steps steps (CFD_CFA_REFINE_STEPS by default) stop
//      early once the error left is at rounding level (cfd_cfa_done). The result is refused (CFD_ERR_INACCURATE) rather than returned inaccurate unless twice the
//      error left, estimated from the contraction of the last two corrections, is below 1e-8 of
//      qacc (cfd_cfa_converged, cfd_cfa_error_left; with an absolute floor near an equilibrium,
//      where qacc itself is tiny).
#include <string.h>

#include "cfa_blocks.h"
#include "chain.h"


static int oee_levels(int n) {
  int levels = 0;
  for (int s = 1; s < n; s *= 2) levels++;
  return levels;
}

size_t cfd_cfa_work_size(int n) {
  return (size_t)n * (12 + 36 * 3 + 36 * 6 + 6 * 2 + 18 + 3 + 2) +
         (size_t)72 * n * oee_levels(n) + cfd_id_work_size(n);
}

// Steps 3-5 for tau_d, given the blocks D0, U0: the elimination (storing its multipliers in EK and
// the final factors in D), then qdd. refine != 0: a further right-hand side with the stored
// elimination; qdd is added to qacc.
static int solve(int n, const double* D0, const double* U0, const double* dj, const double* sigma,
                 const double* taud, double* D, double* U, double* D2, double* U2, double* Rh,
                 double* Rh2, double* frow, double* EK, int refine, double* qacc) {
  // 3. the system the elimination starts from
  for (int i = 0; i < n; i++) {
    if (refine) cfd_cfa_rhs_row(i, n, D0, U0, dj, sigma, taud, Rh);
    else cfd_cfa_system_row(i, n, D0, U0, dj, sigma, taud, D, U, Rh, frow);
  }
  // 4. odd-even elimination: after the level of stride s, equation i couples to i +- 2s
  int level = 0;
  for (int s = 1; s < n; s *= 2, level++) {
    double* E = EK + (size_t)72 * n * level;
    for (int i = 0; i < n; i++) {
      if (refine) cfd_oee_rhs(i, s, n, E + 72 * i, E + 72 * i + 36, Rh, Rh2);
      else if (cfd_oee_update(i, s, n, D, U, Rh, D2, U2, Rh2, E + 72 * i, E + 72 * i + 36))
        return CFD_ERR_SINGULAR;
    }
    double* t;
    if (!refine) {
      t = D; D = D2; D2 = t;
      t = U; U = U2; U2 = t;
    }
    t = Rh; Rh = Rh2; Rh2 = t;
  }
  // the system is block diagonal now; the factors stay in D for later right-hand sides (an even
  // number of swaps leaves them where a refinement finds them: the caller's D, or D2)
  for (int i = 0; i < n; i++) {
    if (!refine && cfd_chol6_factor_rdiag(D + 36 * i)) return CFD_ERR_SINGULAR;
    cfd_chol6_solve_rdiag(D + 36 * i, Rh + 6 * i);
  }
  // 5. qdd from the f-rows
  for (int i = 0; i < n; i++) {
    double x = cfd_cfa_qdd(i, n, frow, Rh, sigma[i]);
    qacc[i] = refine ? qacc[i] + x : x;
  }
  return CFD_OK;
}

int cfd_fd_cfa_cpu(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                   const double* extra_diag, double* qacc, double* work) {
  return cfd_fd_cfa_cpu_ex(c, NULL, q, qd, tau, extra_diag, qacc, work);
}

int cfd_fd_cfa_cpu_ex(const cfd_chain* c, const cfd_cfa_options* opt, const double* q,
                      const double* qd, const double* tau, const double* extra_diag, double* qacc,
                      double* work) {
  const int steps = !opt || !opt->refine_steps ? CFD_CFA_REFINE_STEPS
                    : opt->refine_steps < 0    ? 0
                                               : opt->refine_steps;
  const int residual_ld = opt && opt->residual_ld;
  int n = c->n;
  double* R = work;
  double* p = R + 9 * n;
  double* Jinv = p + 3 * n;
  double* G = Jinv + 36 * n;
  double* P = G + 36 * n;
  double* D0 = P + 36 * n;  // unmodified blocks, then two buffers of each level's D, U, R
  double* U0 = D0 + 36 * n;
  double* D = U0 + 36 * n;
  double* D2 = D + 36 * n;
  double* U = D2 + 36 * n;
  double* U2 = U + 36 * n;
  double* Rh = U2 + 36 * n;
  double* Rh2 = Rh + 6 * n;
  double* frow = Rh2 + 6 * n;
  double* taud = frow + 18 * n;
  double* sigma = taud + n;
  double* dj = sigma + n;
  double* scratch = dj + n;

  // 1. tau_d = tau - bias
  int st = cfd_id_cpu(c, q, qd, NULL, taud, scratch);
  if (st) return st;
  for (int i = 0; i < n; i++) taud[i] = tau[i] - taud[i];

  // 2. per-link blocks
  cfd_link_poses(c, q, R, p);
  for (int i = 0; i < n; i++) {
    if (cfd_inertia_inverse(c->inertia + 36 * i, Jinv + 36 * i)) return CFD_ERR_MASSLESS;
    cfd_ad_inv_mat(R + 9 * i, p + 3 * i, G + 36 * i);
    cfd_cfa_basis(c->screw + 6 * i, P + 36 * i);
    sigma[i] = cfd_cfa_sigma(c->screw + 6 * i);
    dj[i] = c->armature[i] + (extra_diag ? extra_diag[i] : 0);
  }
  for (int i = 0; i < n; i++) {
    cfd_cfa_diag_block(Jinv + 36 * i, i ? Jinv + 36 * (i - 1) : NULL, i ? G + 36 * i : NULL,
                       P + 36 * i, D0 + 36 * i);
    if (i + 1 < n)
      cfd_cfa_upper_block(Jinv + 36 * i, G + 36 * (i + 1), P + 36 * i, P + 36 * (i + 1), U0 + 36 * i);
  }

  double* EK = scratch + cfd_id_work_size(n) + 2 * n;
  // after the elimination the factors sit in D or D2, by the parity of the level count
  double* Dfinal = oee_levels(n) % 2 ? D2 : D;
  st = solve(n, D0, U0, dj, sigma, taud, D, U, D2, U2, Rh, Rh2, frow, EK, 0, qacc);
  double* r = scratch + cfd_id_work_size(n);
  double* before = r + n;  // qacc before the step, to measure the correction
  double prev = INFINITY;  // the previous step's correction
  for (int step = 0; step < steps && !st; step++) {  // 6.
    if (residual_ld && (st = cfd_id_ld(c, q, qd, qacc, r))) break;
    if (!residual_ld) cfd_id_cpu(c, q, qd, qacc, r, scratch);
    for (int i = 0; i < n; i++) r[i] = tau[i] - r[i] - dj[i] * qacc[i];
    memcpy(before, qacc, sizeof(double) * n);
    st = solve(n, D0, U0, dj, sigma, r, Dfinal, U, D2, U2, Rh, Rh2, frow, EK, 1, qacc);
    double corr = 0, size = 0;
    for (int i = 0; i < n && !st; i++) {
      corr = fmax(corr, fabs(qacc[i] - before[i]));
      size = fmax(size, fabs(qacc[i]));
    }
    int done = !st && cfd_cfa_done(corr, prev, size);
    if (!st && (done || step == steps - 1) && !cfd_cfa_converged(corr, prev, size))
      st = CFD_ERR_INACCURATE;
    prev = corr;
    if (done) break;
  }
  return st;
}
