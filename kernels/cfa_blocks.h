// cfa_blocks.h: the per-link pieces of the constraint force algorithm, shared by the CPU reference
// (cpu/cfa_cpu.c) and the CUDA kernels, so both compute the same blocks the same way.
//
// Derivation with a joint-diagonal term ([GPUFD] eq. 9-17, docs/DESIGN.md 4.4), bias removed:
//   (I - Gamma) Vd = S qdd,   (I - Gamma)^T F = J Vd,   tau_d = S^T F + D qdd
// so S qdd = K F with K = (I - Gamma) J^-1 (I - Gamma)^T, block tridiagonal:
//   K_ii = J_i^-1 + G_i J_{i-1}^-1 G_i^T,   K_{i,i+1} = -J_i^-1 G_{i+1}^T,   G_i = Ad(f_{i,i-1}).
// Per joint take P_i = [W_i S_i] with W_i^T S_i = 0 (W_i: orthonormal basis of S_i's complement)
// and write F_i = W_i g_i + S_i f_i, x_i = (g_i; f_i). With sigma_i = S_i^T S_i (the code uses
// the unit column S_i/|S_i| instead, for which every formula below holds with sigma_i = |S_i|):
//   W^T K F = W^T S qdd = 0         ->  A g + B f = 0
//   S^T K F = Sigma qdd              ->  B^T g + C f = Sigma qdd
//   tau_d = Sigma f + D qdd
// where [[A, B], [B^T, C]] = P^T K P. Eliminating qdd from the last two rows:
//   D_i > 0:  B^T g + (C + sigma^2 / D) f = sigma tau_d / D    (f-row scaled by sigma / D)
//   D_i = 0:  f_i = tau_d_i / sigma_i, known: moved to the right-hand side.
// Either way the per-joint 6x6 block system is symmetric positive definite and block tridiagonal
// ([GPUFD] eq. 18), which odd-even elimination (Algorithm 2) solves in ceil(log2 n) levels. Then
//   qdd_i = (S^T K F)_i / sigma_i,
// the f-row of the unmodified P^T K P applied to x ([GPUFD]'s qdd = C tau + B^T F_c with D = 0).
#ifndef CHAINFD_CFA_BLOCKS_H
#define CHAINFD_CFA_BLOCKS_H

#include "cfd_math.h"

// P = [W S/|S|] for a screw S: W is an orthonormal basis of the complement of S (modified
// Gram-Schmidt of the unit vectors other than S's largest component), so P is orthogonal and
// P^T K P keeps K's conditioning (an unnormalised S column costs CFA digits). P is row-major,
// P[6*r + c]: columns 0..4 = W, column 5 = S/|S|.
CFD_HD void cfd_cfa_basis(const double S[6], double P[36]) {
  double s2 = cfd_dot6(S, S);
  int big = 0;
  for (int k = 1; k < 6; k++)
    if (fabs(S[k]) > fabs(S[big])) big = k;
  double basis[5][6];
  int col = 0;
  for (int e = 0; e < 6; e++) {
    if (e == big) continue;
    double* w = basis[col];
    for (int k = 0; k < 6; k++) w[k] = (k == e) ? 1.0 : 0.0;
    double t = S[e] / s2;  // remove the S component
    for (int k = 0; k < 6; k++) w[k] -= t * S[k];
    for (int prev = 0; prev < col; prev++) {
      double d = cfd_dot6(w, basis[prev]);
      for (int k = 0; k < 6; k++) w[k] -= d * basis[prev][k];
    }
    double wn = sqrt(cfd_dot6(w, w));
    for (int k = 0; k < 6; k++) w[k] /= wn;
    col++;
  }
  for (int r = 0; r < 6; r++) {
    for (int c = 0; c < 5; c++) P[6 * r + c] = basis[c][r];
    P[6 * r + 5] = S[r] / sqrt(s2);
  }
}

// sigma = S^T P[:, 5] = |S|: the scale between the joint's force coordinate and tau
CFD_HD double cfd_cfa_sigma(const double S[6]) { return sqrt(cfd_dot6(S, S)); }

// J^-1 of a symmetric positive definite 6x6 (Cholesky). Returns 0, or nonzero when J is singular.
CFD_HD int cfd_inertia_inverse(const double J[36], double Jinv[36]) {
  double L[36];
  for (int k = 0; k < 36; k++) L[k] = J[k];
  if (cfd_chol_factor(L, 6, 6)) return 1;
  for (int k = 0; k < 36; k++) Jinv[k] = (k % 7 == 0) ? 1.0 : 0.0;
  cfd_chol_solve(L, 6, 6, Jinv, 6, 6);
  return 0;
}

// The diagonal block P_i^T K_ii P_i of link i. Jinv_prev / G_i are ignored for i = 0 (pass NULL).
// Row by row, so that a GPU thread holds K and a row of a product, not three 6x6 temporaries.
CFD_HD void cfd_cfa_diag_block(const double* CFD_RESTRICT Jinv, const double* CFD_RESTRICT Jinv_prev,
                               const double* CFD_RESTRICT G, const double* CFD_RESTRICT P,
                               double* CFD_RESTRICT Dblk) {
  double K[36];
  for (int k = 0; k < 36; k++) K[k] = Jinv[k];
  if (Jinv_prev) {
    for (int r = 0; r < 6; r++) {  // row r of G J^-1_{i-1} G^T
      double t[6];
      for (int c = 0; c < 6; c++) {
        double s = 0;
        for (int k = 0; k < 6; k++) s += G[6 * r + k] * Jinv_prev[6 * k + c];
        t[c] = s;
      }
      for (int c = 0; c < 6; c++) {
        double s = 0;
        for (int k = 0; k < 6; k++) s += t[k] * G[6 * c + k];
        K[6 * r + c] += s;
      }
    }
  }
  for (int r = 0; r < 6; r++) {  // row r of P^T K P
    double t[6];
    for (int c = 0; c < 6; c++) {
      double s = 0;
      for (int k = 0; k < 6; k++) s += P[6 * k + r] * K[6 * k + c];
      t[c] = s;
    }
    for (int c = 0; c < 6; c++) {
      double s = 0;
      for (int k = 0; k < 6; k++) s += t[k] * P[6 * k + c];
      Dblk[6 * r + c] = s;
    }
  }
}

// The upper block P_i^T K_{i,i+1} P_{i+1} = -P_i^T J_i^-1 G_{i+1}^T P_{i+1}, column by column.
CFD_HD void cfd_cfa_upper_block(const double* CFD_RESTRICT Jinv, const double* CFD_RESTRICT G_next,
                                const double* CFD_RESTRICT P, const double* CFD_RESTRICT P_next,
                                double* CFD_RESTRICT Ublk) {
  for (int c = 0; c < 6; c++) {
    double t[6], t2[6];
    for (int r = 0; r < 6; r++) {  // column c of G^T P_{i+1}
      double s = 0;
      for (int k = 0; k < 6; k++) s += G_next[6 * k + r] * P_next[6 * k + c];
      t[r] = s;
    }
    for (int r = 0; r < 6; r++) {  // of J^-1 G^T P_{i+1}
      double s = 0;
      for (int k = 0; k < 6; k++) s += Jinv[6 * r + k] * t[k];
      t2[r] = s;
    }
    for (int r = 0; r < 6; r++) {
      double s = 0;
      for (int k = 0; k < 6; k++) s += P[6 * k + r] * t2[k];
      Ublk[6 * r + c] = -s;
    }
  }
}

// One level of odd-even elimination ([GPUFD] eq. 19, Algorithm 2), row by row. Equation i
// couples to x_{i-s} through U_{i-s}^T and to x_{i+s} through U_i; with the multipliers
//   E_i = U_i D_{i+s}^-1,   K_i = U_{i-s}^T D_{i-s}^-1
// the next level (stride 2s) is D_i' = D_i - E_i U_i^T - K_i U_{i-s}, R_i' = R_i - E_i R_{i+s} -
// K_i R_{i-s}, U_i' = -E_i U_{i+s}. Row c of all of them needs only row c of E_i and K_i, one
// symmetric solve each (D_{i+s} e = (row c of U_i)^T, D_{i-s} k = column c of U_{i-s}), so the six
// rows are independent: the CPU runs them in turn, the GPU on six threads.

// The Cholesky factor of D_j into L (36; reciprocal diagonal, cfd_chol6_factor_rdiag), for the
// solves with it. Returns nonzero when singular.
CFD_HD int cfd_oee_factor(const double* D, int j, double L[36]) {
  for (int k = 0; k < 36; k++) L[k] = D[36 * j + k];
  return cfd_chol6_factor_rdiag(L);
}

// Row c of equation i's update, in parts, so that a GPU thread can take one row (cuda/cfa.cu):
// begin (row c of D_i, R_i[c]), next (with the factor L of D_{i+s}: row c of E_i, and E_i's terms),
// prev (with the factor of D_{i-s}: row c of K_i, and K_i's terms), end (the next level's rows).
typedef struct {
  double row[6], r, e[6], k[6];  // row c of D_i' and R_i'[c] so far; rows c of E_i and K_i
} cfd_oee_rowacc;

CFD_HD void cfd_oee_row_begin(int i, int c, const double* CFD_RESTRICT D,
                              const double* CFD_RESTRICT R, cfd_oee_rowacc* a) {
  for (int m = 0; m < 6; m++) a->row[m] = D[36 * i + 6 * c + m], a->e[m] = a->k[m] = 0;
  a->r = R[6 * i + c];
}

// i + s < n: E_i = U_i D_{i+s}^-1, so row c of E_i solves D_{i+s} e = (row c of U_i)^T.
// L: the factor of D_{i+s}; Ui = U_i, Rs = R_{i+s}. With U_i = 0 (no equation i + s: U_i is zero
// then at every level) the contributions are exact zeros, whatever L and Rs are.
CFD_HD void cfd_oee_row_next(int c, const double* CFD_RESTRICT L, const double* CFD_RESTRICT Ui,
                             const double* CFD_RESTRICT Rs, cfd_oee_rowacc* a) {
  for (int m = 0; m < 6; m++) a->e[m] = Ui[6 * c + m];
  cfd_chol6_solve_rdiag(L, a->e);
  for (int m = 0; m < 6; m++) {  // row c of E_i U_i^T
    double t = 0;
    for (int j = 0; j < 6; j++) t += a->e[j] * Ui[6 * m + j];
    a->row[m] -= t;
  }
  double t = 0;
  for (int j = 0; j < 6; j++) t += a->e[j] * Rs[j];
  a->r -= t;
}

// i >= s: K_i = U_{i-s}^T D_{i-s}^-1, so row c of K_i solves D_{i-s} k = column c of U_{i-s}.
// L: the factor of D_{i-s}; Um = U_{i-s}, Rm = R_{i-s} (a zero Um contributes exact zeros).
CFD_HD void cfd_oee_row_prev(int c, const double* CFD_RESTRICT L, const double* CFD_RESTRICT Um,
                             const double* CFD_RESTRICT Rm, cfd_oee_rowacc* a) {
  for (int m = 0; m < 6; m++) a->k[m] = Um[6 * m + c];
  cfd_chol6_solve_rdiag(L, a->k);
  for (int m = 0; m < 6; m++) {  // row c of K_i U_{i-s}
    double t = 0;
    for (int j = 0; j < 6; j++) t += a->k[j] * Um[6 * j + m];
    a->row[m] -= t;
  }
  double t = 0;
  for (int j = 0; j < 6; j++) t += a->k[j] * Rm[j];
  a->r -= t;
}

// Writes row c of D_i', U_i' = -E_i U_{i+s} (the new coupling to x_{i+2s}), R_i'[c], and column c
// of E_i^T and K_i^T into Eo and Ko (zero where absent), for further right-hand sides
// (cfd_oee_rhs_row).
CFD_HD void cfd_oee_row_end(int i, int s, int n, int c, const double* CFD_RESTRICT U,
                            const cfd_oee_rowacc* a, double* CFD_RESTRICT Dn,
                            double* CFD_RESTRICT Un, double* CFD_RESTRICT Rn,
                            double* CFD_RESTRICT Eo, double* CFD_RESTRICT Ko) {
  const double* Up = U + 36 * (i + s);
  for (int m = 0; m < 6; m++) {
    Dn[36 * i + 6 * c + m] = a->row[m];
    Eo[6 * m + c] = a->e[m];
    Ko[6 * m + c] = a->k[m];
    double t = 0;
    if (i + 2 * s < n)
      for (int j = 0; j < 6; j++) t += a->e[j] * Up[6 * j + m];
    Un[36 * i + 6 * c + m] = -t;
  }
  Rn[6 * i + c] = a->r;
}

// Equation i's update, all six rows (the CPU reference). Returns nonzero when a neighbour's D is
// singular.
CFD_HD int cfd_oee_update(int i, int s, int n, const double* D, const double* U, const double* R,
                          double* Dn, double* Un, double* Rn, double* Eo, double* Ko) {
  double Lnext[36], Lprev[36];
  int next = i + s < n, prev = i - s >= 0;
  if (next && cfd_oee_factor(D, i + s, Lnext)) return 1;
  if (prev && cfd_oee_factor(D, i - s, Lprev)) return 1;
  for (int c = 0; c < 6; c++) {
    cfd_oee_rowacc a;
    cfd_oee_row_begin(i, c, D, R, &a);
    if (next) cfd_oee_row_next(c, Lnext, U + 36 * i, R + 6 * (i + s), &a);
    if (prev) cfd_oee_row_prev(c, Lprev, U + 36 * (i - s), R + 6 * (i - s), &a);
    cfd_oee_row_end(i, s, n, c, U, &a, Dn, Un, Rn, Eo, Ko);
  }
  return 0;
}

// Row c of the same level for a right-hand side alone, with the multipliers stored:
//   R'_i = R_i - E_i R_{i+s} - K_i R_{i-s}
CFD_HD void cfd_oee_rhs_row(int i, int s, int n, int c, const double* CFD_RESTRICT Et,
                            const double* CFD_RESTRICT Kt, const double* CFD_RESTRICT R,
                            double* CFD_RESTRICT Rn) {
  double e = R[6 * i + c];
  if (i + s < n)
    for (int k = 0; k < 6; k++) e -= Et[6 * k + c] * R[6 * (i + s) + k];
  if (i - s >= 0)
    for (int k = 0; k < 6; k++) e -= Kt[6 * k + c] * R[6 * (i - s) + k];
  Rn[6 * i + c] = e;
}

CFD_HD void cfd_oee_rhs(int i, int s, int n, const double* Et, const double* Kt, const double* R,
                        double* Rn) {
  for (int c = 0; c < 6; c++) cfd_oee_rhs_row(i, s, n, c, Et, Kt, R, Rn);
}

// The right-hand side of equation i alone (as cfd_cfa_system_row computes it), for a further
// tau_d with the same blocks.
CFD_HD void cfd_cfa_rhs_row(int i, int n, const double* CFD_RESTRICT D0,
                            const double* CFD_RESTRICT U0, const double* CFD_RESTRICT dj,
                            const double* CFD_RESTRICT sigma, const double* CFD_RESTRICT taud,
                            double* CFD_RESTRICT R) {
  int known_prev = i > 0 && !(dj[i - 1] > 0), known = !(dj[i] > 0);
  int known_next = i + 1 < n && !(dj[i + 1] > 0);
  double f_prev = known_prev ? taud[i - 1] / sigma[i - 1] : 0;
  double f = known ? taud[i] / sigma[i] : 0;
  double f_next = known_next ? taud[i + 1] / sigma[i + 1] : 0;
  for (int k = 0; k < 6; k++) {
    double r = (k == 5 && !known) ? sigma[i] * taud[i] / dj[i] : 0;
    r -= D0[36 * i + 6 * k + 5] * f;
    if (known_prev) r -= U0[36 * (i - 1) + 30 + k] * f_prev;
    if (known_next) r -= U0[36 * i + 6 * k + 5] * f_next;
    R[6 * i + k] = r;
  }
  if (known) R[6 * i + 5] = f;
}

// Right-hand side and joint-diagonal term for equation i (see the derivation above), reading the
// unmodified blocks D0/U0 of P^T K P and writing the system the elimination starts from (D, U, R)
// and the unmodified f-row (frow: couplings to x_{i-1}, x_i, x_{i+1}) that gives qdd afterwards.
// dj: joint-diagonal terms, sigma = |S| (cfd_cfa_sigma), taud = tau - bias (all n).
CFD_HD void cfd_cfa_system_row(int i, int n, const double* CFD_RESTRICT D0,
                               const double* CFD_RESTRICT U0, const double* CFD_RESTRICT dj,
                               const double* CFD_RESTRICT sigma, const double* CFD_RESTRICT taud,
                               double* CFD_RESTRICT D, double* CFD_RESTRICT U,
                               double* CFD_RESTRICT R, double* CFD_RESTRICT frow) {
  double* fr = frow + 18 * i;
  for (int k = 0; k < 6; k++) {
    fr[k] = i ? U0[36 * (i - 1) + 6 * k + 5] : 0;  // column 5 of U_{i-1}
    fr[6 + k] = D0[36 * i + 30 + k];               // row 5 of D_i
    fr[12 + k] = (i + 1 < n) ? U0[36 * i + 30 + k] : 0;
  }
  cfd_cfa_rhs_row(i, n, D0, U0, dj, sigma, taud, R);
  int known = !(dj[i] > 0), known_next = i + 1 < n && !(dj[i + 1] > 0);
  double* Di = D + 36 * i;
  double* Ui = U + 36 * i;
  for (int k = 0; k < 36; k++) Di[k] = D0[36 * i + k];
  for (int k = 0; k < 36; k++) Ui[k] = (i + 1 < n) ? U0[36 * i + k] : 0;
  if (known) {  // decouple the known unknown: identity row and column
    for (int k = 0; k < 6; k++) {
      Di[6 * k + 5] = Di[30 + k] = 0;
      Ui[30 + k] = 0;
    }
    Di[35] = 1;
  } else {
    Di[35] += sigma[i] * sigma[i] / dj[i];
  }
  if (known_next)
    for (int k = 0; k < 6; k++) Ui[6 * k + 5] = 0;
}

// The error left after the last refinement step, estimated from the last two corrections (max
// norms; prev = INFINITY when there is none). The step multiplies the error by about
// rho = corr / prev, so the correction is about (1 - rho) times the error before it and the error
// left is about corr rho / (1 - rho): the steps to come added up (corr rho alone undershoots as rho
// nears 1). A correction that did not shrink measures no contraction: then nothing is known
// unless the corrections are at rounding level, where the iterates only wander (the error left is
// then taken as the correction itself). At rounding level the ratio of two corrections is noise,
// shrinking or not (near an equilibrium 3.69e-15 after 3.70e-15 gives rho = 0.997 and would
// extrapolate 300 times the correction), so there the error left is at most the correction.
#define CFD_CFA_EXACT 1e-13
#define CFD_CFA_FLOOR 1e-12
CFD_HD double cfd_cfa_error_left(double corr, double prev, double size) {
  double left = INFINITY;
  if (prev < INFINITY && corr < prev) {
    double rho = corr / prev;
    left = corr * rho / (1 - rho);
  }
  return corr <= CFD_CFA_EXACT * size + CFD_CFA_FLOOR && corr < left ? corr : left;
}

// Whether iterative refinement has converged: the error left, with a margin of CFD_CFA_MARGIN,
// below CFD_CFA_ACCEPT times qacc, with an absolute floor (rad/s^2 or m/s^2) for states at an
// equilibrium, where qacc itself is nearly zero. corr, prev, size: max norms of the last and the
// previous correction and of qacc. The estimate is close, not a bound: a contraction that is not
// quite steady leaves somewhat more than estimated, which the margin covers (checked by
// `chainfd-cfa-accuracy --probe` on tiled random chains; bench/results/LOG.md).
#define CFD_CFA_ACCEPT 1e-8
#define CFD_CFA_MARGIN 2
CFD_HD int cfd_cfa_converged(double corr, double prev, double size) {
  return CFD_CFA_MARGIN * cfd_cfa_error_left(corr, prev, size) <= CFD_CFA_ACCEPT * size + CFD_CFA_FLOOR;
}

// Whether refinement can stop before its last step: the error left is at rounding level. Long or
// ill-conditioned chains take every step; well-conditioned ones stop after two.
CFD_HD int cfd_cfa_done(double corr, double prev, double size) {
  if (!(prev < INFINITY)) return 0;  // one correction says nothing about the contraction
  double exact = CFD_CFA_EXACT * size + CFD_CFA_FLOOR;
  return corr <= exact || cfd_cfa_error_left(corr, prev, size) <= exact;  // (converged decides)
}

// qdd_i = (S^T K F)_i / sigma_i from the solved x and the unmodified f-row.
CFD_HD double cfd_cfa_qdd(int i, int n, const double* frow, const double* x, double sigma) {
  const double* fr = frow + 18 * i;
  double s = cfd_dot6(fr + 6, x + 6 * i);
  if (i > 0) s += cfd_dot6(fr, x + 6 * (i - 1));
  if (i + 1 < n) s += cfd_dot6(fr + 12, x + 6 * (i + 1));
  return s / sigma;
}

#endif  // CHAINFD_CFA_BLOCKS_H
