// chainfd_deriv: analytical derivatives of the forward dynamics and of the step (chainfd_deriv.h),
// on the CPU. The model's chain and its step parameters are a CPU rollout's (core/rollout.c), so
// the two take the same models with the same checks; the math is kernels/id_deriv.h.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chainfd_deriv.h"
#include "chainfd_rollout.h"
#include "deriv_internal.h"
#include "id_deriv.h"
#include "mj_chain.h"
#include "rollout_internal.h"
#include "rollout_step.h"

struct chainfd_deriv {
  chainfd_rollout* r;  // the chain and step parameters
  const cfd_chain* c;
  const cfd_rollout_params* p;
  int n, nu, rk4;
  double* w;      // n x CFD_IDD_LINK: the world-frame quantities
  double* cw;     // n x CFD_IDD_COMP: the subtree sums
  double* M;      // n x n: M + the joint diagonal, then its Cholesky factor
  double* X;      // n x (2n + nu): the right-hand sides, then the derivatives
  double* x;      // 2n: the state in the chain's coordinates (rollout layout)
  double* q;      // n: q = qpos - qpos0
  double* tau;    // n: the applied force
  double* bias;   // n
  double* qacc;   // n
  double* dtau;   // n: scratch (the pivots' reciprocals)
  double* dq;     // n: d tau / d q (diagonal: springs, actuators' length terms)
  double* dv;     // n: d tau / d qvel (diagonal: damping, velocity gains)
  double* du;     // n x nu: d tau / d ctrl
  double* diag;   // n: the integrator's joint diagonal (Euler damping, implicitfast's -h qDeriv)
  double* ddiag;  // nu: d diag[act_dof[a]] / d ctrl_a
  int* sub;       // n
};

static int fail(char* err, int size, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && size > 0) vsnprintf(err, size, fmt, ap);
  va_end(ap);
  return 1;
}

static const char* elem(const mjModel* m, int type, int id, char* buf, int size) {
  cfd_mj_name(m, type, id, buf, size);
  return buf;
}

// The first constraint row a rollout takes that is active in every state, named (0: none): friction
// loss and equalities. (Limits are taken where they are not active: load.)
static int rows_refused(const mjModel* m, char* err, int size) {
  char b[128];
  int off = m->opt.disableflags;
  if (off & mjDSBL_CONSTRAINT) return 0;
  for (int i = 0; i < m->nv && !(off & mjDSBL_FRICTIONLOSS); i++)
    if (m->dof_frictionloss[i] > 0)
      return fail(err, size, "derivatives refused: joint %s has friction loss (constraint rows: "
                  "the derivatives of the constrained step are not done yet)",
                  elem(m, mjOBJ_JOINT, m->dof_jntid[i], b, sizeof b));
  for (int e = 0; e < m->neq && !(off & mjDSBL_EQUALITY); e++)
    if (m->eq_active0[e])
      return fail(err, size, "derivatives refused: equality %s is a constraint row (the "
                  "derivatives of the constrained step are not done yet)",
                  elem(m, mjOBJ_EQUALITY, e, b, sizeof b));
  return 0;
}

void chainfd_deriv_free(chainfd_deriv* dv) {
  if (!dv) return;
  chainfd_rollout_free(dv->r);
  free(dv->w); free(dv->cw); free(dv->M); free(dv->X); free(dv->x);
  free(dv->sub);
  free(dv);
}

int chainfd_deriv_create(const mjModel* m, chainfd_deriv** out, char* err, int err_size) {
  *out = NULL;
  if (rows_refused(m, err, err_size)) return 1;
  chainfd_deriv* dv = calloc(1, sizeof(*dv));
  if (!dv) return fail(err, err_size, "derivatives: out of memory");
  // the rollouts take Euler and implicitfast; an RK4 model's qacc is the same as Euler's
  mjModel* euler = NULL;
  dv->rk4 = m->opt.integrator == mjINT_RK4;
  if (dv->rk4) {
    euler = mj_copyModel(NULL, m);
    if (!euler) {
      free(dv);
      return fail(err, err_size, "derivatives: out of memory");
    }
    euler->opt.integrator = mjINT_EULER;
  }
  char why[1024];
  int st = chainfd_rollout_create(euler ? euler : m, CHAINFD_CPU, &dv->r, why, sizeof why);
  if (euler) mj_deleteModel(euler);
  if (st) {
    free(dv);
    // "rollout refused: X" -> "derivatives refused: X"
    const char* reason = strncmp(why, "rollout refused: ", 17) ? why : why + 17;
    return fail(err, err_size, "derivatives refused: %s", reason);
  }
  dv->c = cfd_rollout_chain(dv->r);
  dv->p = cfd_rollout_params_of(dv->r);
  int n = dv->n = dv->c->n, nu = dv->nu = m->nu;
  for (int i = 0; i < n; i++)
    if (dv->c->kind[i] != CFD_LINK_SCREW) {
      char b[128];
      fail(err, err_size, "derivatives refused: joint %s is a ball or free joint (the derivatives "
           "take hinges and slides so far)", elem(m, mjOBJ_JOINT, dv->c->jnt[i], b, sizeof b));
      chainfd_deriv_free(dv);
      return 1;
    }
  size_t cols = 2 * (size_t)n + nu;
  dv->w = malloc(sizeof(double) * CFD_IDD_LINK * n);
  dv->cw = malloc(sizeof(double) * CFD_IDD_COMP * n);
  dv->M = malloc(sizeof(double) * n * n);
  dv->X = malloc(sizeof(double) * n * cols);
  dv->x = malloc(sizeof(double) * (11 * (size_t)n + (size_t)n * nu + nu + 1));
  dv->sub = malloc(sizeof(int) * n);
  if (!dv->w || !dv->cw || !dv->M || !dv->X || !dv->x || !dv->sub) {
    chainfd_deriv_free(dv);
    return fail(err, err_size, "derivatives: out of memory for %d dofs", n);
  }
  dv->q = dv->x + 2 * n;
  dv->tau = dv->q + n;
  dv->bias = dv->tau + n;
  dv->qacc = dv->bias + n;
  dv->dtau = dv->qacc + n;
  dv->dq = dv->dtau + n;
  dv->dv = dv->dq + n;
  dv->diag = dv->dv + n;
  dv->du = dv->diag + n;
  dv->ddiag = dv->du + (size_t)n * nu;
  *out = dv;
  return 0;
}

// The applied force tau at the state (x, v) and controls u, and its derivatives (rollout_step.h's
// passive and actuator forces, differentiated); with `integrator`, the step's joint diagonal and
// its control derivative too
static void applied(chainfd_deriv* dv, const double* u, int integrator) {
  const cfd_rollout_params* p = dv->p;
  int n = dv->n, nu = dv->nu;
  const double *x = dv->x, *v = dv->x + n;
  double h = p->h;
  for (int i = 0; i < n; i++) {
    double dummy;
    cfd_rollout_passive(p, i, 1, x[i], v[i], &dv->q[i], &dv->tau[i], integrator ? &dv->diag[i] : &dummy);
    if (!integrator) dv->diag[i] = 0;
    dv->dq[i] = -p->stiffness[i];
    dv->dv[i] = -p->damping[i];
  }
  memset(dv->du, 0, sizeof(double) * n * nu);
  for (int a = 0; a < nu; a++) {
    int i = p->act_dof[a];
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
    dv->tau[i] += g * force;
    dv->ddiag[a] = 0;
    if (saturated) continue;
    dv->dq[i] += g * g * (G[1] * uc + B[1]);
    dv->dv[i] += g * g * (G[2] * uc + B[2]);
    dv->du[(size_t)i * nu + a] = inside ? g * gain : 0;
    if (integrator && p->integrator == CFD_INT_IMPLICITFAST) {
      dv->diag[i] -= h * g * g * ((G[2] != 0 ? G[2] * uc : 0) + B[2]);
      dv->ddiag[a] = inside ? -h * g * g * G[2] : 0;
    }
  }
}

// L L^T X = B in place for the `cols` columns of X (row-major, leading dimension ld) from `first`:
// row operations, so that the inner loops run along contiguous columns (and vectorise), and one
// reciprocal per pivot
static void chol_solve_rows(const double* L, int n, double* X, int first, int cols, int ld,
                            double* inv) {
  for (int i = 0; i < n; i++) inv[i] = 1 / L[(size_t)n * i + i];
  for (int i = 0; i < n; i++) {
    double* xi = X + (size_t)ld * i + first;
    for (int k = 0; k < i; k++) {
      double l = L[(size_t)n * i + k];
      const double* xk = X + (size_t)ld * k + first;
      for (int c = 0; c < cols; c++) xi[c] -= l * xk[c];
    }
    for (int c = 0; c < cols; c++) xi[c] *= inv[i];
  }
  for (int i = n - 1; i >= 0; i--) {
    double* xi = X + (size_t)ld * i + first;
    for (int k = i + 1; k < n; k++) {
      double l = L[(size_t)n * k + i];
      const double* xk = X + (size_t)ld * k + first;
      for (int c = 0; c < cols; c++) xi[c] -= l * xk[c];
    }
    for (int c = 0; c < cols; c++) xi[c] *= inv[i];
  }
}

// (M + diag) qacc = tau - bias and its derivatives: DqDq, DqDv (n x n) and DqDu (n x nu),
// row-major, any NULL
static int solve(chainfd_deriv* dv, double* qacc, double* Dq, double* Dv, double* Du, char* err,
                 int err_size) {
  const cfd_chain* c = dv->c;
  int n = dv->n, nu = dv->nu, cols = 2 * n + nu;
  double* v = dv->x + n;
  cfd_idd_forward(c, dv->q, v, NULL, dv->w, dv->bias);
  cfd_idd_composites(c, dv->w, dv->cw);
  cfd_idd_mass(c, dv->w, dv->cw, dv->M);
  for (int i = 0; i < n; i++) dv->M[(size_t)n * i + i] += c->armature[i] + dv->diag[i];
  if (cfd_chol_factor(dv->M, n, n)) return fail(err, err_size, "derivatives: the joint-space system is singular");
  for (int i = 0; i < n; i++) dv->qacc[i] = dv->tau[i] - dv->bias[i];
  cfd_chol_solve(dv->M, n, n, dv->qacc, 1, 1);
  // ID's derivatives at (q, qd, qacc) (its composites do not depend on the acceleration), then
  // the right-hand sides d tau / dx - d ID / dx
  cfd_idd_accel(c, v, dv->qacc, dv->w, NULL);
  memset(dv->X, 0, sizeof(double) * n * cols);
  cfd_idd_jacobians(c, dv->w, dv->cw, -1, Dq ? dv->X : NULL, Dv ? dv->X + n : NULL, cols, dv->sub);
  for (int j = 0; j < n; j++) {
    dv->X[(size_t)cols * j + j] += dv->dq[j];
    dv->X[(size_t)cols * j + n + j] += dv->dv[j];
  }
  for (int i = 0; i < n; i++)
    for (int a = 0; a < nu; a++) dv->X[(size_t)cols * i + 2 * n + a] = dv->du[(size_t)i * nu + a];
  for (int a = 0; a < nu; a++) {  // implicitfast: the diagonal's control term, -d diag/du qacc
    int i = dv->p->act_dof[a];
    dv->X[(size_t)cols * i + 2 * n + a] -= dv->ddiag[a] * dv->qacc[i];
  }
  int first = Dq ? 0 : Dv ? n : 2 * n, last = Du ? cols : Dv ? 2 * n : n;
  if (first < last) chol_solve_rows(dv->M, n, dv->X, first, last - first, cols, dv->dtau);
  for (int i = 0; i < n; i++) {
    if (qacc) qacc[i] = dv->qacc[i];
    for (int j = 0; j < n; j++) {
      if (Dq) Dq[(size_t)n * i + j] = dv->X[(size_t)cols * i + j];
      if (Dv) Dv[(size_t)n * i + j] = dv->X[(size_t)cols * i + n + j];
    }
    for (int a = 0; a < nu && Du; a++) Du[(size_t)nu * i + a] = dv->X[(size_t)cols * i + 2 * n + a];
  }
  return 0;
}

// d's state and controls into dv, checked
static int load(chainfd_deriv* dv, const mjModel* m, const mjData* d, char* err, int err_size) {
  if (m->nv != dv->n || m->nu != dv->nu)
    return fail(err, err_size, "derivatives: the model has nv=%d nu=%d, the context was created "
                "for nv=%d nu=%d", (int)m->nv, (int)m->nu, dv->n, dv->nu);
  for (int i = 0; i < m->nq; i++)
    if (!isfinite(d->qpos[i])) return fail(err, err_size, "derivatives: qpos[%d] is not finite", i);
  for (int i = 0; i < m->nv; i++)
    if (!isfinite(d->qvel[i])) return fail(err, err_size, "derivatives: qvel[%d] is not finite", i);
  for (int a = 0; a < m->nu; a++)
    if (!isfinite(d->ctrl[a])) return fail(err, err_size, "derivatives: ctrl[%d] is not finite", a);
  chainfd_rollout_get_state(m, d, dv->x);
  for (int i = 0; i < dv->n && dv->p->rows; i++) {  // a limit's row (rollout_step.h's test)
    const double* P = dv->p->rows + CFD_RP_COUNT * i;
    if (!P[CFD_RP_LIMITED]) continue;
    double x = dv->x[i], margin = P[CFD_RP_MARGIN];
    if (x - P[CFD_RP_LO] < margin || P[CFD_RP_HI] - x < margin) {
      char b[128];
      return fail(err, err_size, "derivatives: joint %s is at its limit (an active constraint row: "
                  "the derivatives of the constrained step are not done yet)",
                  elem(m, mjOBJ_JOINT, dv->c->jnt[i], b, sizeof b));
    }
  }
  return 0;
}

int chainfd_deriv_qacc(chainfd_deriv* dv, const mjModel* m, const mjData* d, double* qacc,
                       double* DqDq, double* DqDv, double* DqDu, char* err, int err_size) {
  if (load(dv, m, d, err, err_size)) return 1;
  applied(dv, d->ctrl, 0);
  return solve(dv, qacc, DqDq, DqDv, DqDu, err, err_size);
}

// One step of semi-implicit Euler (mj_Euler, mj_implicitSkip with a diagonal qDeriv): with the
// step's acceleration a (the joint diagonal D in its system), v' = v + h a and q' = q + h v', so
//   A = [[I + h^2 a_q, h I + h^2 a_v], [h a_q, I + h a_v]],   B = [[h^2 a_u], [h a_u]]
int chainfd_transition_derivatives(chainfd_deriv* dv, const mjModel* m, const mjData* d,
                                   double* A, double* B, char* err, int err_size) {
  if (dv->rk4)
    return fail(err, err_size, "transition derivatives refused: the model integrates with RK4 "
                "(Euler and implicitfast are taken)");
  if (load(dv, m, d, err, err_size)) return 1;
  int n = dv->n, nu = dv->nu, nx = 2 * n;
  double h = dv->p->h;
  applied(dv, d->ctrl, 1);
  double* Dq = malloc(sizeof(double) * ((size_t)2 * n * n + (size_t)n * nu + 1));
  if (!Dq) return fail(err, err_size, "derivatives: out of memory");
  double *Dv = Dq + (size_t)n * n, *Du = Dv + (size_t)n * n;
  int st = solve(dv, NULL, Dq, Dv, Du, err, err_size);
  for (int i = 0; i < n && !st; i++) {
    for (int j = 0; j < n && A; j++) {
      double aq = Dq[(size_t)n * i + j], av = Dv[(size_t)n * i + j], id = i == j;
      A[(size_t)nx * i + j] = id + h * h * aq;
      A[(size_t)nx * i + n + j] = h * id + h * h * av;
      A[(size_t)nx * (n + i) + j] = h * aq;
      A[(size_t)nx * (n + i) + n + j] = id + h * av;
    }
    for (int a = 0; a < nu && B; a++) {
      double au = Du[(size_t)nu * i + a];
      B[(size_t)nu * i + a] = h * h * au;
      B[(size_t)nu * (n + i) + a] = h * au;
    }
  }
  free(Dq);
  return st;
}

int cfd_deriv_reference_qacc(chainfd_deriv* dv, const mjModel* m, const mjData* d, double* qacc,
                             char* err, int err_size) {
  if (load(dv, m, d, err, err_size)) return 1;
  applied(dv, d->ctrl, 0);
  int st = cfd_fd_reference(dv->c, dv->q, dv->x + dv->n, dv->tau, NULL, qacc);
  return st ? fail(err, err_size, "derivatives: the reference failed: %s", cfd_status_str(st)) : 0;
}
