// CFA (paper 000 eq. 9-19): the constraint force algorithm, serial reference. The derivation with
// the joint-diagonal term is in cfa_blocks.h, whose per-link steps cuda/cfa.cu runs in parallel.
//   1. bias torques by inverse dynamics, tau_d = tau - bias
//   2. per link: the blocks of P^T K P (A, B and C together), P = [W S]
//   3. right-hand side and the joint-diagonal term (armature, h*damping)
//   4. odd-even elimination of the block-tridiagonal system, ceil(log2 n) levels (Algorithm 2)
//   5. qdd_i = (S^T K F)_i / sigma_i
//   6. one step of iterative refinement: r = tau - ID(q, qd, qdd) - D qdd, solved by steps 3-5
//      with the same blocks. The elimination works on K = (I - Gamma) J^-1 (I - Gamma)^T, whose
//      conditioning (light links, long lever arms) costs CFA up to 1e-7 relative on random
//      chains of 100 links; one refinement step against the accurate inverse dynamics brings it
//      back to about 1e-13. CFD_CFA_REFINE_STEPS = 0 gives the raw algorithm (tests measure both).
#include <string.h>

#include "cfa_blocks.h"
#include "chain.h"

int cfd_cfa_refine_steps = 1;

size_t cfd_cfa_work_size(int n) {
  return (size_t)n * (12 + 36 * 3 + 36 * 6 + 6 * 2 + 18 + 3 + 2) + cfd_id_work_size(n);
}

// Steps 3-5 for one right-hand side tau_d, given the blocks D0, U0.
static int solve(int n, const double* D0, const double* U0, const double* dj, const double* sigma,
                 const double* taud, double* D, double* U, double* D2, double* U2, double* Rh,
                 double* Rh2, double* frow, double* qacc) {
  // 3. the system the elimination starts from
  for (int i = 0; i < n; i++) cfd_cfa_system_row(i, n, D0, U0, dj, sigma, taud, D, U, Rh, frow);

  // 4. odd-even elimination: after the level of stride s, equation i couples to i +- 2s
  for (int s = 1; s < n; s *= 2) {
    for (int i = 0; i < n; i++)
      if (cfd_oee_update(i, s, n, D, U, Rh, D2, U2, Rh2)) return CFD_ERR_SINGULAR;
    double* t;
    t = D; D = D2; D2 = t;
    t = U; U = U2; U2 = t;
    t = Rh; Rh = Rh2; Rh2 = t;
  }
  for (int i = 0; i < n; i++) {  // the system is block diagonal now
    double L[36];
    for (int k = 0; k < 36; k++) L[k] = D[36 * i + k];
    if (cfd_chol_factor(L, 6, 6)) return CFD_ERR_SINGULAR;
    cfd_chol_solve(L, 6, 6, Rh + 6 * i, 1, 1);
  }

  // 5. qdd from the f-rows
  for (int i = 0; i < n; i++) qacc[i] = cfd_cfa_qdd(i, n, frow, Rh, sigma[i]);
  return CFD_OK;
}

int cfd_fd_cfa_cpu(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                   const double* extra_diag, double* qacc, double* work) {
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
    sigma[i] = cfd_dot6(c->screw + 6 * i, c->screw + 6 * i);
    dj[i] = c->armature[i] + (extra_diag ? extra_diag[i] : 0);
  }
  for (int i = 0; i < n; i++) {
    cfd_cfa_diag_block(Jinv + 36 * i, i ? Jinv + 36 * (i - 1) : NULL, i ? G + 36 * i : NULL,
                       P + 36 * i, D0 + 36 * i);
    if (i + 1 < n)
      cfd_cfa_upper_block(Jinv + 36 * i, G + 36 * (i + 1), P + 36 * i, P + 36 * (i + 1), U0 + 36 * i);
  }

  st = solve(n, D0, U0, dj, sigma, taud, D, U, D2, U2, Rh, Rh2, frow, qacc);
  for (int step = 0; step < cfd_cfa_refine_steps && !st; step++) {  // 6.
    double* r = scratch + cfd_id_work_size(n);
    double* dq = r + n;
    cfd_id_cpu(c, q, qd, qacc, r, scratch);
    for (int i = 0; i < n; i++) r[i] = tau[i] - r[i] - dj[i] * qacc[i];
    st = solve(n, D0, U0, dj, sigma, r, D, U, D2, U2, Rh, Rh2, frow, dq);
    for (int i = 0; i < n && !st; i++) qacc[i] += dq[i];
  }
  return st;
}
