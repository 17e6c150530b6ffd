// CFA (paper 000 eq. 9-19): the constraint force algorithm, serial reference. The derivation with
// the joint-diagonal term is in cfa_blocks.h. Steps, each one parallel over links on a GPU:
//   1. bias torques by inverse dynamics, tau_d = tau - bias
//   2. per link: J^-1, P = [W S], the blocks of P^T K P (A, B, C together)
//   3. right-hand side and the joint-diagonal term (armature, h*damping)
//   4. odd-even elimination of the block-tridiagonal system, ceil(log2 n) levels (Algorithm 2)
//   5. qdd_i = (S^T K F)_i / sigma_i
#include <string.h>

#include "cfa_blocks.h"
#include "chain.h"

size_t cfd_cfa_work_size(int n) {
  size_t id = cfd_id_work_size(n);
  return (size_t)n * (12 + 36 * 3 + 36 * 5 + 6 * 2 + 18 + 3) + id;
}

int cfd_fd_cfa_cpu(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                   const double* extra_diag, double* qacc, double* work) {
  int n = c->n;
  double* R = work;
  double* p = R + 9 * n;
  double* Jinv = p + 3 * n;
  double* G = Jinv + 36 * n;
  double* P = G + 36 * n;
  double* D = P + 36 * n;   // two buffers of each level's D, U, R, and the factors of D
  double* D2 = D + 36 * n;
  double* U = D2 + 36 * n;
  double* U2 = U + 36 * n;
  double* Lf = U2 + 36 * n;
  double* Rh = Lf + 36 * n;
  double* Rh2 = Rh + 6 * n;
  double* frow = Rh2 + 6 * n;  // n x 18: the unmodified f-row, couplings to x_{i-1}, x_i, x_{i+1}
  double* taud = frow + 18 * n;
  double* sigma = taud + n;
  double* fknown = sigma + n;
  double* scratch = fknown + n;

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
  }
  memset(U, 0, sizeof(double) * 36 * n);
  memset(U2, 0, sizeof(double) * 36 * n);
  for (int i = 0; i < n; i++) {
    cfd_cfa_diag_block(Jinv + 36 * i, i ? Jinv + 36 * (i - 1) : NULL, i ? G + 36 * i : NULL,
                       P + 36 * i, D + 36 * i);
    if (i + 1 < n)
      cfd_cfa_upper_block(Jinv + 36 * i, G + 36 * (i + 1), P + 36 * i, P + 36 * (i + 1), U + 36 * i);
  }
  for (int i = 0; i < n; i++) {
    double* fr = frow + 18 * i;
    for (int k = 0; k < 6; k++) {
      fr[k] = i ? U[36 * (i - 1) + 6 * k + 5] : 0;  // column 5 of U_{i-1}
      fr[6 + k] = D[36 * i + 30 + k];                // row 5 of D_i
      fr[12 + k] = (i + 1 < n) ? U[36 * i + 30 + k] : 0;
    }
  }

  // 3. right-hand side with the joint-diagonal term
  memset(Rh, 0, sizeof(double) * 6 * n);
  for (int i = 0; i < n; i++) {
    double dj = c->armature[i] + (extra_diag ? extra_diag[i] : 0);
    if (dj > 0) {
      D[36 * i + 35] += sigma[i] * sigma[i] / dj;
      Rh[6 * i + 5] = sigma[i] * taud[i] / dj;
      fknown[i] = NAN;
    } else {
      fknown[i] = taud[i] / sigma[i];
    }
  }
  for (int i = 0; i < n; i++) {  // move known f_i to the right (all rows that couple to it)
    double f = fknown[i];
    if (isnan(f)) continue;
    for (int k = 0; k < 6; k++) {
      Rh[6 * i + k] -= D[36 * i + 6 * k + 5] * f;
      if (i > 0) Rh[6 * (i - 1) + k] -= U[36 * (i - 1) + 6 * k + 5] * f;
      if (i + 1 < n) Rh[6 * (i + 1) + k] -= U[36 * i + 30 + k] * f;
    }
  }
  for (int i = 0; i < n; i++) {  // and decouple its row and column
    if (isnan(fknown[i])) continue;
    for (int k = 0; k < 6; k++) {
      D[36 * i + 6 * k + 5] = D[36 * i + 30 + k] = 0;
      if (i > 0) U[36 * (i - 1) + 6 * k + 5] = 0;
      if (i + 1 < n) U[36 * i + 30 + k] = 0;
    }
    D[36 * i + 35] = 1;
    Rh[6 * i + 5] = fknown[i];
  }

  // 4. odd-even elimination: after the level of stride s, equation i couples to i +- 2s
  for (int s = 1; s < n; s *= 2) {
    for (int i = 0; i < n; i++) {
      for (int k = 0; k < 36; k++) Lf[36 * i + k] = D[36 * i + k];
      if (cfd_chol_factor(Lf + 36 * i, 6, 6)) return CFD_ERR_SINGULAR;
    }
    memset(U2, 0, sizeof(double) * 36 * n);
    for (int i = 0; i < n; i++) cfd_oee_update(i, s, n, D, Lf, U, Rh, D2, U2, Rh2);
    double* t;
    t = D; D = D2; D2 = t;
    t = U; U = U2; U2 = t;
    t = Rh; Rh = Rh2; Rh2 = t;
  }
  for (int i = 0; i < n; i++) {  // the system is block diagonal now
    if (cfd_chol_factor(D + 36 * i, 6, 6)) return CFD_ERR_SINGULAR;
    cfd_chol_solve(D + 36 * i, 6, 6, Rh + 6 * i, 1, 1);
  }

  // 5. qdd from the f-rows
  for (int i = 0; i < n; i++) {
    const double* fr = frow + 18 * i;
    double s = cfd_dot6(fr + 6, Rh + 6 * i);
    if (i > 0) s += cfd_dot6(fr, Rh + 6 * (i - 1));
    if (i + 1 < n) s += cfd_dot6(fr + 12, Rh + 6 * (i + 1));
    qacc[i] = s / sigma[i];
  }
  return CFD_OK;
}
