// deriv_instance.h: the derivatives of one state's forward dynamics, written once for the CPU
// (core/deriv.c) and the GPU's thread per instance (cuda/deriv.cu):
//   (M + diag) qacc = tau(x, u) - bias(q, qd)
//   d qacc / dx = (M + diag)^-1 (d tau / dx - d ID(q, qd, qacc) / dx [- d diag / dx qacc])
// tau: rollout_step.h's passive and actuator forces, differentiated here; ID's derivatives:
// id_deriv.h. diag: the step's joint diagonal (Euler's h damping, implicitfast's -h qDeriv) when
// the derivatives are a step's, else 0.
#ifndef CHAINFD_DERIV_INSTANCE_H
#define CHAINFD_DERIV_INSTANCE_H

#include "id_deriv.h"
#include "rollout_step.h"

// One instance's scratch, for n dofs and nu controls (cfd_deriv_doubles of them, and n ints)
typedef struct cfd_deriv_scratch {
  double *w, *cw, *M, *X;        // id_deriv.h's w and cw, M + diag then its factor, n x (2n + nu)
  double *q, *tau, *bias, *qacc, *inv, *dq, *dv, *diag, *du, *ddiag;
  int* sub;
} cfd_deriv_scratch;

CFD_HD long cfd_deriv_doubles(int n, int nu) {
  return (long)(CFD_IDD_LINK + CFD_IDD_COMP + 9) * n + (long)n * n + (long)n * (2 * n + nu) +
         (long)n * nu + nu;
}

// Lays s over `doubles` (cfd_deriv_doubles) and `ints` (n)
CFD_HD void cfd_deriv_scratch_at(cfd_deriv_scratch* s, int n, int nu, double* doubles, int* ints) {
  s->w = doubles;
  s->cw = s->w + CFD_IDD_LINK * n;
  s->M = s->cw + CFD_IDD_COMP * n;
  s->X = s->M + n * n;
  s->q = s->X + n * (2 * n + nu);
  s->tau = s->q + n;
  s->bias = s->tau + n;
  s->qacc = s->bias + n;
  s->inv = s->qacc + n;
  s->dq = s->inv + n;
  s->dv = s->dq + n;
  s->diag = s->dv + n;
  s->du = s->diag + n;
  s->ddiag = s->du + n * nu;
  s->sub = ints;
}

// The applied force on dof i at the state (x, v) (qpos and qvel in the chain's dofs) and controls
// u, with its derivatives (diagonal dq, dv; row i of du, n x nu) and, with `step`, the step's joint
// diagonal and the control derivative of its actuators' (ddiag, per actuator on dof i)
CFD_HD void cfd_deriv_applied_dof(const cfd_rollout_params* p, int i, const double* x,
                                  const double* v, const double* u, int step, cfd_deriv_scratch* s) {
  int nu = p->nu;
  double h = p->h, diag;
  cfd_rollout_passive(p, i, 1, x[i], v[i], &s->q[i], &s->tau[i], &diag);
  s->diag[i] = step ? diag : 0;
  s->dq[i] = -p->stiffness[i];
  s->dv[i] = -p->damping[i];
  for (int a = 0; a < nu; a++) s->du[i * nu + a] = 0;
  for (int a = 0; a < nu; a++) {
    if (p->act_dof[a] != i) continue;
    const double* cr = p->ctrlrange + 2 * a;
    const double* G = p->gain + 3 * a;
    const double* B = p->bias + 3 * a;
    const double* fr = p->forcerange + 2 * a;
    double uc = cfd_rollout_clamp(p, a, u ? u[a] : 0), g = p->gear[a];
    int inside = !(cr[0] < cr[1]) || (uc > cr[0] && uc < cr[1]);
    double len = g * x[i], vel = g * v[i], gain = G[0] + G[1] * len + G[2] * vel;
    double force = gain * uc + B[0] + B[1] * len + B[2] * vel;
    int saturated = fr[0] < fr[1] && (force <= fr[0] || force >= fr[1]);
    if (fr[0] < fr[1]) force = fmin(fmax(force, fr[0]), fr[1]);
    s->tau[i] += g * force;
    s->ddiag[a] = 0;
    if (saturated) continue;
    s->dq[i] += g * g * (G[1] * uc + B[1]);
    s->dv[i] += g * g * (G[2] * uc + B[2]);
    s->du[i * nu + a] = inside ? g * gain : 0;
    if (step && p->integrator == CFD_INT_IMPLICITFAST) {
      s->diag[i] -= h * g * g * ((G[2] != 0 ? G[2] * uc : 0) + B[2]);
      s->ddiag[a] = inside ? -h * g * g * G[2] : 0;
    }
  }
}

// The applied forces on every dof (cfd_deriv_applied_dof)
CFD_HD void cfd_deriv_applied(const cfd_rollout_params* p, const double* x, const double* v,
                              const double* u, int step, cfd_deriv_scratch* s) {
  for (int i = 0; i < p->n; i++) cfd_deriv_applied_dof(p, i, x, v, u, step, s);
}

// L L^T X = B in place for `cols` columns of X from `first` (row-major, leading dimension ld): row
// operations, the inner loops along contiguous columns, one reciprocal per pivot (into inv)
CFD_HD void cfd_deriv_chol_solve_rows(const double* L, int n, double* X, int first, int cols,
                                      int ld, double* inv) {
  for (int i = 0; i < n; i++) inv[i] = 1 / L[n * i + i];
  for (int i = 0; i < n; i++) {
    double* xi = X + (long)ld * i + first;
    for (int k = 0; k < i; k++) {
      double l = L[n * i + k];
      const double* xk = X + (long)ld * k + first;
      for (int c = 0; c < cols; c++) xi[c] -= l * xk[c];
    }
    for (int c = 0; c < cols; c++) xi[c] *= inv[i];
  }
  for (int i = n - 1; i >= 0; i--) {
    double* xi = X + (long)ld * i + first;
    for (int k = i + 1; k < n; k++) {
      double l = L[n * k + i];
      const double* xk = X + (long)ld * k + first;
      for (int c = 0; c < cols; c++) xi[c] -= l * xk[c];
    }
    for (int c = 0; c < cols; c++) xi[c] *= inv[i];
  }
}

// L L^T x = b in place for column `col` of X (leading dimension ld), the pivots' reciprocals in
// inv: the operations of cfd_deriv_chol_solve_rows on that column, in its order (a GPU lane's)
CFD_HD void cfd_deriv_chol_solve_col(const double* L, const double* inv, int n, double* X, int col,
                                     int ld) {
  for (int i = 0; i < n; i++) {
    double xi = X[(long)ld * i + col];
    for (int k = 0; k < i; k++) xi -= L[n * i + k] * X[(long)ld * k + col];
    X[(long)ld * i + col] = xi * inv[i];
  }
  for (int i = n - 1; i >= 0; i--) {
    double xi = X[(long)ld * i + col];
    for (int k = i + 1; k < n; k++) xi -= L[n * k + i] * X[(long)ld * k + col];
    X[(long)ld * i + col] = xi * inv[i];
  }
}

// qacc and its derivatives for the applied forces in s (cfd_deriv_applied) at velocity v: into
// s->qacc and s->X's columns [0, n) (d/dq, with want_q), [n, 2n) (d/dqd, want_v), [2n, 2n + nu)
// (d/du, want_u). Returns 0, or 1 when M + diag has no Cholesky factor.
CFD_HD int cfd_deriv_solve(const cfd_chain* c, const cfd_rollout_params* p, const double* v,
                           int want_q, int want_v, int want_u, cfd_deriv_scratch* s) {
  int n = p->n, nu = p->nu, cols = 2 * n + nu;
  cfd_idd_forward(c, s->q, v, NULL, s->w, s->bias);
  cfd_idd_composites(c, s->w, s->cw);
  cfd_idd_mass(c, s->w, s->cw, s->M);
  for (int i = 0; i < n; i++) s->M[n * i + i] += c->armature[i] + s->diag[i];
  if (cfd_chol_factor(s->M, n, n)) return 1;
  for (int i = 0; i < n; i++) s->qacc[i] = s->tau[i] - s->bias[i];
  cfd_deriv_chol_solve_rows(s->M, n, s->qacc, 0, 1, 1, s->inv);
  // ID's derivatives at (q, qd, qacc) (the composites do not depend on the acceleration), then
  // the right-hand sides d tau / dx - d ID / dx
  cfd_idd_accel(c, v, s->qacc, s->w, NULL);
  for (long k = 0; k < (long)n * cols; k++) s->X[k] = 0;
  cfd_idd_jacobians(c, s->w, s->cw, -1, want_q ? s->X : NULL, want_v ? s->X + n : NULL, cols, s->sub);
  for (int j = 0; j < n; j++) {
    s->X[cols * j + j] += s->dq[j];
    s->X[cols * j + n + j] += s->dv[j];
  }
  for (int i = 0; i < n; i++)
    for (int a = 0; a < nu; a++) s->X[cols * i + 2 * n + a] = s->du[i * nu + a];
  for (int a = 0; a < nu; a++) {  // implicitfast: the diagonal's control term, -d diag/du qacc
    int i = p->act_dof[a];
    s->X[cols * i + 2 * n + a] -= s->ddiag[a] * s->qacc[i];
  }
  int first = want_q ? 0 : want_v ? n : 2 * n, last = want_u ? cols : want_v ? 2 * n : n;
  if (first < last) cfd_deriv_chol_solve_rows(s->M, n, s->X, first, last - first, cols, s->inv);
  return 0;
}

#endif  // CHAINFD_DERIV_INSTANCE_H
