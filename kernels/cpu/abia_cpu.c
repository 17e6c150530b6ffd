// ABIA ([GPUFD] eq. 8, [SCAN] section IV): the articulated-body inertia recursion, reference
// form with dense 6x6 algebra, on the kinematic tree (p = parent[i]; a chain: p = i - 1). Three
// sweeps:
//   out:  V_i = Ad(f_{i,p}) V_p + S_i qd_i,   c_i = ad_{V_i} S_i qd_i (joints.h for a ball)
//   in:   IA_i = J_i + sum over children k of Ad* Ia_k Ad,
//         pA_i = -ad*_{V_i} J_i V_i + sum over children k of Ad* pa_k
//         U_i = IA_i S_i,  d_i = S_i^T U_i + D_i,  u_i = tau_i - S_i^T pA_i
//         Ia_i = IA_i - U_i U_i^T / d_i,  pa_i = pA_i + Ia_i c_i + U_i u_i / d_i
//   out:  a'_i = Ad a_p + c_i,  qdd_i = (u_i - U_i^T a'_i) / d_i,  a_i = a'_i + S_i qdd_i
// D_i is the joint-diagonal term (armature + extra_diag); the base acceleration is -g.
#include <string.h>

#include "chain.h"
#include "cfd_math.h"
#include "joints.h"

size_t cfd_abia_work_size(int n) { return (size_t)n * (12 + 6 + 6 + 36 + 6 + 6 + 2); }

int cfd_fd_abia_cpu(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                    const double* extra_diag, double* qacc, double* work) {
  int n = c->n;
  double* R = work;
  double* p = R + 9 * n;
  double* V = p + 3 * n;
  double* cv = V + 6 * n;   // velocity-product accelerations c_i
  double* IA = cv + 6 * n;  // articulated inertias
  double* pA = IA + 36 * n; // articulated bias forces
  double* U = pA + 6 * n;
  double* d = U + 6 * n;
  double* u = d + n;
  cfd_link_poses(c, q, R, p);

  const double zero[6] = {0}, base[6] = {0, 0, 0, -c->gravity[0], -c->gravity[1], -c->gravity[2]};
  for (int i = 0; i < n; i++) {
    const double* S = c->screw + 6 * i;
    int par = c->parent[i], g = cfd_ball_first(c, i);
    double* Vi = V + 6 * i;
    double JV[6];
    cfd_twist_to_child(R + 9 * i, p + 3 * i, par < 0 ? zero : V + 6 * par, Vi);
    for (int k = 0; k < 6; k++) Vi[k] += S[k] * qd[i];
    cfd_link_c(c, i, Vi, qd[i], V + 6 * g, qd[g], cv + 6 * i);
    memcpy(IA + 36 * i, c->inertia + 36 * i, 36 * sizeof(double));
    cfd_mat6_vec(c->inertia + 36 * i, Vi, JV);
    cfd_neg_adstar(Vi, JV, pA + 6 * i);
  }
  for (int i = n - 1; i >= 0; i--) {
    const double* S = c->screw + 6 * i;
    double* Ui = U + 6 * i;
    cfd_mat6_vec(IA + 36 * i, S, Ui);
    d[i] = cfd_dot6(S, Ui) + c->armature[i] + (extra_diag ? extra_diag[i] : 0);
    if (!(d[i] > 0)) return CFD_ERR_SINGULAR;
    u[i] = tau[i] - cfd_dot6(S, pA + 6 * i);
    int par = c->parent[i];
    if (par < 0) continue;
    double Ia[36], pa[6], Iac[6], Ip[36], pp[6];
    for (int r = 0; r < 6; r++)
      for (int k = 0; k < 6; k++) Ia[6 * r + k] = IA[36 * i + 6 * r + k] - Ui[r] * Ui[k] / d[i];
    cfd_mat6_vec(Ia, cv + 6 * i, Iac);
    for (int k = 0; k < 6; k++) pa[k] = pA[6 * i + k] + Iac[k] + Ui[k] * u[i] / d[i];
    cfd_inertia_to_parent(R + 9 * i, p + 3 * i, Ia, Ip);
    cfd_wrench_to_parent(R + 9 * i, p + 3 * i, pa, pp);
    for (int k = 0; k < 36; k++) IA[36 * par + k] += Ip[k];
    for (int k = 0; k < 6; k++) pA[6 * par + k] += pp[k];
  }

  double* A = V;  // the velocities are spent: the accelerations take their place
  for (int i = 0; i < n; i++) {
    const double* S = c->screw + 6 * i;
    int par = c->parent[i];
    double ai[6];
    cfd_twist_to_child(R + 9 * i, p + 3 * i, par < 0 ? base : A + 6 * par, ai);
    for (int k = 0; k < 6; k++) ai[k] += cv[6 * i + k];
    qacc[i] = (u[i] - cfd_dot6(U + 6 * i, ai)) / d[i];
    for (int k = 0; k < 6; k++) A[6 * i + k] = ai[k] + S[k] * qacc[i];
  }
  return CFD_OK;
}
