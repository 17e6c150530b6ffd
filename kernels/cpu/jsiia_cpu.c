// JSIIA ([GPUFD] eq. 7): qacc = M(q)^-1 (tau - bias). M by composite rigid bodies in twist form,
// on the kinematic tree:
//   Ic_i = J_i + sum over children k of Ad*(f_{k,i}) Ic_k Ad(f_{k,i}),
//   M_ii = S_i^T Ic_i S_i (+ armature),
//   M_ji = S_j^T Ad*(f_{..}) Ic_i S_i for j an ancestor of i (the wrench Ic_i S_i carried down),
//   M_ji = 0 for the rest,
// then the LTDL factorisation on the tree's sparsity (as MuJoCo factors M: no fill-in, n^3/6 on a
// chain), and one step of
// iterative refinement against inverse dynamics (r = tau - ID - D qdd, solved with the same factor:
// O(n^2)), which recovers the digits that forming M loses on ill-conditioned chains.
#include <stdlib.h>
#include <string.h>

#include "chain.h"
#include "cfd_math.h"

static int mass_matrix(const cfd_chain* c, const double* R, const double* p, double* Ic, double* M) {
  int n = c->n;
  memcpy(Ic, c->inertia, sizeof(double) * 36 * n);
  memset(M, 0, sizeof(double) * (size_t)n * n);  // entries off the ancestor lines stay 0
  for (int i = n - 1; i >= 0; i--) {
    int par = c->parent[i];
    if (par < 0) continue;
    double Ip[36];
    cfd_inertia_to_parent(R + 9 * i, p + 3 * i, Ic + 36 * i, Ip);
    for (int k = 0; k < 36; k++) Ic[36 * par + k] += Ip[k];
  }
  for (int i = 0; i < n; i++) {
    double F[6];
    cfd_mat6_vec(Ic + 36 * i, c->screw + 6 * i, F);
    M[(size_t)i * n + i] = cfd_dot6(c->screw + 6 * i, F) + c->armature[i];
    for (int k = i, j = c->parent[i]; j >= 0; k = j, j = c->parent[j]) {
      double Fp[6];
      cfd_wrench_to_parent(R + 9 * k, p + 3 * k, F, Fp);
      memcpy(F, Fp, sizeof(F));
      M[(size_t)j * n + i] = M[(size_t)i * n + j] = cfd_dot6(c->screw + 6 * j, F);
    }
  }
  return CFD_OK;
}

// M = L^T D L in place (Featherstone's LTDL): L unit lower triangular with L_ki nonzero only where
// i is an ancestor of k, so the tree's sparsity is kept (no fill-in) and the cost is the sum of
// the squared depths (n^3 / 6 for a chain, as Cholesky). M's strict lower triangle becomes L, its
// diagonal D. 0, or CFD_ERR_SINGULAR.
static int ltdl_factor(const int* parent, double* M, int n) {
  for (int k = n - 1; k >= 0; k--) {
    double* Mk = M + (size_t)k * n;
    if (!(Mk[k] > 0)) return CFD_ERR_SINGULAR;
    for (int i = parent[k]; i >= 0; i = parent[i]) {
      double a = Mk[i] / Mk[k];
      double* Mi = M + (size_t)i * n;
      for (int j = i; j >= 0; j = parent[j]) Mi[j] -= a * Mk[j];
      Mk[i] = a;
    }
  }
  return CFD_OK;
}

// x = M^-1 x from ltdl_factor's L and D
static void ltdl_solve(const int* parent, const double* M, int n, double* x) {
  for (int k = n - 1; k >= 0; k--)  // L^T y = x
    for (int i = parent[k]; i >= 0; i = parent[i]) x[i] -= M[(size_t)k * n + i] * x[k];
  for (int k = 0; k < n; k++) x[k] /= M[(size_t)k * n + k];
  for (int k = 0; k < n; k++)  // L x = y / D
    for (int i = parent[k]; i >= 0; i = parent[i]) x[k] -= M[(size_t)k * n + i] * x[i];
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
  if (ltdl_factor(c->parent, M, n)) return CFD_ERR_SINGULAR;
  ltdl_solve(c->parent, M, n, rhs);
  memcpy(qacc, rhs, sizeof(double) * n);
  double* r = M + (size_t)n * n;  // refinement
  cfd_id_cpu(c, q, qd, qacc, r, r + n);
  for (int i = 0; i < n; i++)
    r[i] = tau[i] - r[i] - (c->armature[i] + (extra_diag ? extra_diag[i] : 0)) * qacc[i];
  ltdl_solve(c->parent, M, n, r);
  for (int i = 0; i < n; i++) qacc[i] += r[i];
  return CFD_OK;
}
