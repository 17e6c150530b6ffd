// JSIIA ([GPUFD] eq. 7): qacc = M(q)^-1 (tau - bias). M by composite rigid bodies in twist form:
//   Ic_i = J_i + Ad*(f_{i+1,i}) Ic_{i+1} Ad(f_{i+1,i}),   M_ii = S_i^T Ic_i S_i (+ armature),
//   M_ji = S_j^T Ad*(f_{j+1..i}) Ic_i S_i for j < i (the wrench Ic_i S_i carried down the chain),
// then a dense Cholesky factorisation (n^3/6) and two triangular solves, and one step of
// iterative refinement against inverse dynamics (r = tau - ID - D qdd, solved with the same factor:
// O(n^2)), which recovers the digits that forming M loses on ill-conditioned chains.
#include <stdlib.h>
#include <string.h>

#include "chain.h"
#include "cfd_math.h"

static int mass_matrix(const cfd_chain* c, const double* R, const double* p, double* Ic, double* M) {
  int n = c->n;
  memcpy(Ic, c->inertia, sizeof(double) * 36 * n);
  for (int i = n - 1; i > 0; i--) {
    double Ip[36];
    cfd_inertia_to_parent(R + 9 * i, p + 3 * i, Ic + 36 * i, Ip);
    for (int k = 0; k < 36; k++) Ic[36 * (i - 1) + k] += Ip[k];
  }
  for (int i = 0; i < n; i++) {
    double F[6];
    cfd_mat6_vec(Ic + 36 * i, c->screw + 6 * i, F);
    M[(size_t)i * n + i] = cfd_dot6(c->screw + 6 * i, F) + c->armature[i];
    for (int j = i - 1; j >= 0; j--) {
      double Fp[6];
      cfd_wrench_to_parent(R + 9 * (j + 1), p + 3 * (j + 1), F, Fp);
      memcpy(F, Fp, sizeof(F));
      M[(size_t)j * n + i] = M[(size_t)i * n + j] = cfd_dot6(c->screw + 6 * j, F);
    }
  }
  return CFD_OK;
}

size_t cfd_jsiia_work_size(int n) {
  return (size_t)n * (12 + 36) + (size_t)n * n + cfd_id_work_size(n) + 2 * (size_t)n;
}

int cfd_mass_matrix_cpu(const cfd_chain* c, const double* q, double* M, double* work) {
  double* R = work;
  double* p = R + 9 * c->n;
  double* Ic = p + 3 * c->n;
  cfd_link_poses(c, q, R, p);
  return mass_matrix(c, R, p, Ic, M);
}

int cfd_fd_jsiia_cpu(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                     const double* extra_diag, double* qacc, double* work) {
  int n = c->n;
  double* rhs = work;  // tau - bias, solved in place into qacc
  double* scratch = work + n;
  int st = cfd_id_cpu(c, q, qd, NULL, rhs, scratch);
  if (st) return st;
  for (int i = 0; i < n; i++) rhs[i] = tau[i] - rhs[i];
  double* M = scratch + (size_t)n * (12 + 36);
  cfd_mass_matrix_cpu(c, q, M, scratch);
  if (extra_diag)
    for (int i = 0; i < n; i++) M[(size_t)i * n + i] += extra_diag[i];
  if (cfd_chol_factor(M, n, n)) return CFD_ERR_SINGULAR;
  cfd_chol_solve(M, n, n, rhs, 1, 1);
  memcpy(qacc, rhs, sizeof(double) * n);
  double* r = M + (size_t)n * n;  // refinement
  cfd_id_cpu(c, q, qd, qacc, r, r + n);
  for (int i = 0; i < n; i++)
    r[i] = tau[i] - r[i] - (c->armature[i] + (extra_diag ? extra_diag[i] : 0)) * qacc[i];
  cfd_chol_solve(M, n, n, r, 1, 1);
  for (int i = 0; i < n; i++) qacc[i] += r[i];
  return CFD_OK;
}
