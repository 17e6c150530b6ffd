// Inverse dynamics by the forward (velocity, acceleration) and backward (force) recursions of
// [SCAN] section III, in twist/adjoint form. These are the serial forms of the scans:
//   V_i  = Ad(f_{i,i-1}) V_{i-1}  + S_i qd_i
//   Vd_i = Ad(f_{i,i-1}) Vd_{i-1} + S_i qdd_i + ad_{V_i} S_i qd_i
//   F_i  = Ad*(f_{i+1,i}) F_{i+1} + J_i Vd_i - ad*_{V_i} J_i V_i
//   tau_i = S_i^T F_i
// The base acceleration is -g, so gravity needs no per-link force.
// This file also holds the helpers every CPU algorithm shares (finiteness, link poses).
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cfd_math.h"
#include "chain.h"

int cfd_check_finite(const double* x, int n) {
  int bad = 0;  // no early exit: branch free and vectorised (a NaN or Inf is the rare case)
  for (int i = 0; i < n; i++) bad |= !(fabs(x[i]) <= DBL_MAX);
  return bad ? CFD_ERR_NONFINITE : CFD_OK;
}

void cfd_link_poses(const cfd_chain* c, const double* q, double* R, double* p) {
  for (int i = 0; i < c->n; i++) {
    double Re[9], pe[3];
    cfd_screw_exp(c->screw + 6 * i, q[i], Re, pe);
    cfd_se3_mul(c->home_R + 9 * i, c->home_p + 3 * i, Re, pe, R + 9 * i, p + 3 * i);
  }
}

size_t cfd_id_work_size(int n) { return (size_t)n * 24; }

int cfd_id_cpu(const cfd_chain* c, const double* q, const double* qd, const double* qdd,
               double* tau, double* work) {
  int n = c->n;
  double* R = work;            // n x 9
  double* p = R + 9 * n;       // n x 3
  double* F = p + 3 * n;       // n x 6: wrench on link i from its parent, in frame i
  double* V = F + 6 * n;       // n x 6 (V_i; the acceleration is kept in a running variable)
  cfd_link_poses(c, q, R, p);

  double Vprev[6] = {0}, Aprev[6] = {0, 0, 0, -c->gravity[0], -c->gravity[1], -c->gravity[2]};
  for (int i = 0; i < n; i++) {
    const double* S = c->screw + 6 * i;
    double* Vi = V + 6 * i;
    double Ai[6], SqdV[6], JV[6], gyro[6];
    cfd_twist_to_child(R + 9 * i, p + 3 * i, Vprev, Vi);
    cfd_twist_to_child(R + 9 * i, p + 3 * i, Aprev, Ai);
    for (int k = 0; k < 6; k++) Vi[k] += S[k] * qd[i];
    double Sqd[6];
    for (int k = 0; k < 6; k++) Sqd[k] = S[k] * qd[i];
    cfd_ad(Vi, Sqd, SqdV);
    for (int k = 0; k < 6; k++) Ai[k] += SqdV[k] + (qdd ? S[k] * qdd[i] : 0);
    // F_i (own part) = J Vd - ad*_V J V
    cfd_mat6_vec(c->inertia + 36 * i, Vi, JV);
    cfd_neg_adstar(Vi, JV, gyro);
    cfd_mat6_vec(c->inertia + 36 * i, Ai, F + 6 * i);
    for (int k = 0; k < 6; k++) F[6 * i + k] += gyro[k];
    memcpy(Vprev, Vi, sizeof(Vprev));
    memcpy(Aprev, Ai, sizeof(Aprev));
  }
  for (int i = n - 1; i >= 0; i--) {
    if (i + 1 < n) {
      double Fp[6];
      cfd_wrench_to_parent(R + 9 * (i + 1), p + 3 * (i + 1), F + 6 * (i + 1), Fp);
      for (int k = 0; k < 6; k++) F[6 * i + k] += Fp[k];
    }
    tau[i] = cfd_dot6(c->screw + 6 * i, F + 6 * i);
  }
  return CFD_OK;
}
