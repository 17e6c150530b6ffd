// Inverse dynamics by the forward (velocity, acceleration) and backward (force) recursions of
// paper 001 section III, in twist/adjoint form. These are the serial forms of the scans:
//   V_i  = Ad(f_{i,i-1}) V_{i-1}  + S_i qd_i
//   Vd_i = Ad(f_{i,i-1}) Vd_{i-1} + S_i qdd_i + ad_{V_i} S_i qd_i
//   F_i  = Ad*(f_{i+1,i}) F_{i+1} + J_i Vd_i - ad*_{V_i} J_i V_i
//   tau_i = S_i^T F_i
// The base acceleration is -g, so gravity needs no per-link force.
// This file also holds the chain model's allocation and the helpers every CPU algorithm shares.
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cfd_math.h"
#include "chain.h"

int cfd_chain_alloc(cfd_chain* c, int n) {
  memset(c, 0, sizeof(*c));
  c->n = n;
  size_t m = n > 0 ? (size_t)n : 1;
  c->home_R = calloc(9 * m, sizeof(double));
  c->home_p = calloc(3 * m, sizeof(double));
  c->screw = calloc(6 * m, sizeof(double));
  c->inertia = calloc(36 * m, sizeof(double));
  c->armature = calloc(m, sizeof(double));
  c->qpos0 = calloc(m, sizeof(double));
  c->body = calloc(m, sizeof(int));
  c->jnt = calloc(m, sizeof(int));
  c->dof = calloc(m, sizeof(int));
  c->qpos = calloc(m, sizeof(int));
  if (!c->home_R || !c->home_p || !c->screw || !c->inertia || !c->armature || !c->qpos0 ||
      !c->body || !c->jnt || !c->dof || !c->qpos) {
    cfd_chain_free(c);
    return CFD_ERR_ALLOC;
  }
  return CFD_OK;
}

void cfd_chain_free(cfd_chain* c) {
  free(c->home_R); free(c->home_p); free(c->screw); free(c->inertia); free(c->armature);
  free(c->qpos0); free(c->body); free(c->jnt); free(c->dof); free(c->qpos);
  memset(c, 0, sizeof(*c));
}

// out's link i: a copy of base's link k (its geometry, inertia and armature)
static void copy_link(cfd_chain* out, size_t i, const cfd_chain* base, size_t k) {
  memcpy(out->home_R + 9 * i, base->home_R + 9 * k, 9 * sizeof(double));
  memcpy(out->home_p + 3 * i, base->home_p + 3 * k, 3 * sizeof(double));
  memcpy(out->screw + 6 * i, base->screw + 6 * k, 6 * sizeof(double));
  memcpy(out->inertia + 36 * i, base->inertia + 36 * k, 36 * sizeof(double));
  out->armature[i] = base->armature[k];
}

int cfd_chain_tile(const cfd_chain* base, int n, cfd_chain* out) {
  if (base->n < 1 || n < 1) return CFD_ERR_ALLOC;
  if (cfd_chain_alloc(out, n)) return CFD_ERR_ALLOC;
  for (int i = 0; i < n; i++) {
    copy_link(out, (size_t)i, base, (size_t)(i % base->n));
    out->body[i] = out->jnt[i] = -1;
    out->dof[i] = out->qpos[i] = i;
  }
  memcpy(out->gravity, base->gravity, sizeof(out->gravity));
  return CFD_OK;
}

int cfd_chain_extend(const cfd_chain* base, int n, cfd_chain* out) {
  if (base->n < 2 || n < 1) return CFD_ERR_ALLOC;
  if (cfd_chain_alloc(out, n)) return CFD_ERR_ALLOC;
  for (size_t i = 0; i < (size_t)n; i++) {
    size_t k = i == 0 ? 0 : 1 + (i - 1) % (size_t)(base->n - 1);
    copy_link(out, i, base, k);
    out->body[i] = base->body[k];
    out->jnt[i] = base->jnt[k];
    out->dof[i] = base->dof[k];
    out->qpos[i] = base->qpos[k];
    out->qpos0[i] = base->qpos0[k];
  }
  memcpy(out->gravity, base->gravity, sizeof(out->gravity));
  return CFD_OK;
}

const char* cfd_status_str(int status) {
  switch (status) {
    case CFD_OK: return "ok";
    case CFD_ERR_SINGULAR: return "the joint-space system is singular (a pivot is not positive)";
    case CFD_ERR_MASSLESS: return "a link has a singular spatial inertia (CFA needs every link's inverse)";
    case CFD_ERR_ALLOC: return "out of memory";
    case CFD_ERR_NONFINITE: return "the state holds NaN or Inf";
    case CFD_ERR_GPU: return "a CUDA call failed";
    case CFD_ERR_INACCURATE:
      return "CFA did not converge to double accuracy on this chain (its constraint-force system is "
             "too ill-conditioned); use abia or jsiia";
    default: return "unknown error";
  }
}

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
