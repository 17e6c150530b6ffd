// Inverse dynamics by the forward (velocity, acceleration) and backward (force) recursions of
// [SCAN] section III, in twist/adjoint form. These are the serial forms of the scans:
//   V_i  = Ad(f_{i,p}) V_p  + S_i qd_i                          (p = parent[i])
//   Vd_i = Ad(f_{i,p}) Vd_p + S_i qdd_i + c_i                   (c_i: joints.h; ad_{V_i} S_i qd_i
//                                                                for a hinge or slide)
//   F_i  = sum over children k of Ad*(f_{k,i}) F_k + J_i Vd_i - ad*_{V_i} J_i V_i
//   tau_i = S_i^T F_i
// on the kinematic tree (a chain: p = i - 1). The base acceleration is -g, so gravity needs no
// per-link force.
// This file also holds the helpers every CPU algorithm shares (finiteness, link poses).
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cfd_math.h"
#include "chain.h"
#include "joints.h"

int cfd_check_finite(const double* x, int n) {
  int bad = 0;  // no early exit: branch free and vectorised (a NaN or Inf is the rare case)
  for (int i = 0; i < n; i++) bad |= !(fabs(x[i]) <= DBL_MAX);
  return bad ? CFD_ERR_NONFINITE : CFD_OK;
}

void cfd_link_poses(const cfd_chain* c, const double* q, double* R, double* p) {
  for (int i = 0; i < c->n; i++) cfd_link_pose(c, i, q, 1, R + 9 * i, p + 3 * i);
}

size_t cfd_id_work_size(int n) { return (size_t)n * 30; }

int cfd_id_cpu(const cfd_chain* c, const double* q, const double* qd, const double* qdd,
               double* tau, double* work) {
  int n = c->n;
  double* R = work;            // n x 9
  double* p = R + 9 * n;       // n x 3
  double* F = p + 3 * n;       // n x 6: wrench on link i from its parent, in frame i
  double* V = F + 6 * n;       // n x 6
  double* A = V + 6 * n;       // n x 6
  cfd_link_poses(c, q, R, p);

  const double zero[6] = {0}, base[6] = {0, 0, 0, -c->gravity[0], -c->gravity[1], -c->gravity[2]};
  for (int i = 0; i < n; i++) {
    const double* S = c->screw + 6 * i;
    int par = c->parent[i], g = cfd_ball_first(c, i);
    double* Vi = V + 6 * i;
    double* Ai = A + 6 * i;
    double ci[6], JV[6], gyro[6];
    cfd_twist_to_child(R + 9 * i, p + 3 * i, par < 0 ? zero : V + 6 * par, Vi);
    cfd_twist_to_child(R + 9 * i, p + 3 * i, par < 0 ? base : A + 6 * par, Ai);
    for (int k = 0; k < 6; k++) Vi[k] += S[k] * qd[i];
    cfd_link_c(c, i, Vi, qd[i], V + 6 * g, qd[g], ci);
    for (int k = 0; k < 6; k++) Ai[k] += ci[k] + (qdd ? S[k] * qdd[i] : 0);
    // F_i (own part) = J Vd - ad*_V J V
    cfd_mat6_vec(c->inertia + 36 * i, Vi, JV);
    cfd_neg_adstar(Vi, JV, gyro);
    cfd_mat6_vec(c->inertia + 36 * i, Ai, F + 6 * i);
    for (int k = 0; k < 6; k++) F[6 * i + k] += gyro[k];
  }
  for (int i = n - 1; i >= 0; i--) {
    tau[i] = cfd_dot6(c->screw + 6 * i, F + 6 * i);
    int par = c->parent[i];
    if (par >= 0) {
      double Fp[6];
      cfd_wrench_to_parent(R + 9 * i, p + 3 * i, F + 6 * i, Fp);
      for (int k = 0; k < 6; k++) F[6 * par + k] += Fp[k];
    }
  }
  return CFD_OK;
}
