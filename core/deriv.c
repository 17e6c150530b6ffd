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
#include "deriv_instance.h"
#include "mj_chain.h"
#include "gpu.h"
#include "rollout_internal.h"

struct chainfd_deriv {
  chainfd_rollout* r;  // the chain and step parameters (and, on a GPU, their device copies)
  const cfd_chain* c;
  const cfd_rollout_params* p;
  int n, nu, rk4, device;
  double* x;           // 2n: the state in the chain's coordinates (rollout layout)
  double* doubles;     // the instance's scratch (deriv_instance.h)
  int* ints;
  double* trans;       // the transitions' scratch (trans_doubles), allocated once
  double* rows;        // with constraint rows (CPU): M, d a/dx (n x (2n + nu)), 5n, 6 an equality
  cfd_deriv_scratch s;
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

// The first constraint row the derivatives do not take, named (0: none): on the GPU friction loss
// and equalities (a GPU batch takes limits where they are not active); the CPU takes the rows the
// rollouts take)
static int rows_refused(const mjModel* m, int device, char* err, int size) {
  char b[128];
  int off = m->opt.disableflags;
  if (off & mjDSBL_CONSTRAINT) return 0;
  for (int i = 0; i < m->nv && !(off & mjDSBL_FRICTIONLOSS) && device >= 0; i++)
    if (m->dof_frictionloss[i] > 0)
      return fail(err, size, "derivatives refused: joint %s has friction loss (constraint rows: "
                  "the GPU's derivatives of the constrained step are not done yet; the CPU's take "
                  "it)", elem(m, mjOBJ_JOINT, m->dof_jntid[i], b, sizeof b));
  for (int e = 0; e < m->neq && !(off & mjDSBL_EQUALITY) && device >= 0; e++)
    if (m->eq_active0[e])
      return fail(err, size, "derivatives refused: equality %s is a constraint row (the "
                  "derivatives of the constrained step are not done yet)",
                  elem(m, mjOBJ_EQUALITY, e, b, sizeof b));
  return 0;
}

// The transitions' scratch: RK4's stage Jacobians dX, dF and their sum (2n x (2n + nu) each), its
// states (x0, X, F, qacc: 2n each), and one solve's Dq, Dv (n x n) and Du (n x nu); Euler's and
// implicitfast's use the last three
static size_t trans_doubles(int n, int nu) {
  size_t nx = 2 * (size_t)n;
  return 3 * nx * (nx + nu) + 4 * nx + 2 * (size_t)n * n + (size_t)n * nu + 1;
}

void chainfd_deriv_free(chainfd_deriv* dv) {
  if (!dv) return;
  chainfd_rollout_free(dv->r);
  free(dv->x); free(dv->doubles); free(dv->ints); free(dv->trans); free(dv->rows);
  free(dv);
}

int chainfd_deriv_create(const mjModel* m, int device, chainfd_deriv** out, char* err, int err_size) {
  *out = NULL;
  if (rows_refused(m, device, err, err_size)) return 1;
  chainfd_deriv* dv = calloc(1, sizeof(*dv));
  if (!dv) return fail(err, err_size, "derivatives: out of memory");
  // the rollouts take Euler and implicitfast; an RK4 model's qacc is the same as Euler's (its
  // transition: rk4_transition)
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
  for (int j = 0; j < m->njnt; j++) {  // ball and free joints: on the CPU, without springs or limits
    int t = m->jnt_type[j];
    if (t != mjJNT_BALL && t != mjJNT_FREE) continue;
    char b[128];
    const char* no = device >= 0 ? "the GPU's derivatives take hinges and slides so far (the CPU's "
                                   "take it)"
                   : m->jnt_stiffness[j] > 0 ? "it has a spring (its derivative in the tangent "
                                               "space is not done yet)"
                   : t == mjJNT_BALL && m->jnt_limited[j] ? "it has a limit (a cone: not done yet)"
                   : dv->rk4 ? "RK4's stages with quaternions are not done yet (Euler and "
                               "implicitfast are)"
                   : NULL;
    if (no) {
      free(dv);
      if (euler) mj_deleteModel(euler);
      return fail(err, err_size, "derivatives refused: joint %s is a %s joint: %s",
                  elem(m, mjOBJ_JOINT, j, b, sizeof b), t == mjJNT_BALL ? "ball" : "free", no);
    }
  }
  if (device < CHAINFD_CPU) {
    free(dv);
    if (euler) mj_deleteModel(euler);
    return fail(err, err_size, "derivatives: device %d is not a device index or CHAINFD_CPU", device);
  }
  dv->device = device;
  int st = chainfd_rollout_create(euler ? euler : m, device, &dv->r, why, sizeof why);
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
  dv->x = malloc(sizeof(double) * 2 * n);
  dv->doubles = malloc(sizeof(double) * cfd_deriv_doubles(n, nu));
  dv->ints = malloc(sizeof(int) * n);
  dv->trans = malloc(sizeof(double) * trans_doubles(n, nu));
  if (dv->p->rows && device < 0)
    dv->rows = malloc(sizeof(double) * ((size_t)n * n + (size_t)n * (2 * n + nu) + 5 * (size_t)n +
                                        6 * (size_t)dv->p->neq));
  if (!dv->x || !dv->doubles || !dv->ints || !dv->trans || (dv->p->rows && device < 0 && !dv->rows)) {
    chainfd_deriv_free(dv);
    return fail(err, err_size, "derivatives: out of memory for %d dofs", n);
  }
  cfd_deriv_scratch_at(&dv->s, n, nu, dv->doubles, dv->ints);
  *out = dv;
  return 0;
}

// d imp / d pos of cfd_rollout_impedance (MuJoCo's getimpedance), 0 where it is flat
static double impedance_slope(const double* imp, double pos, double margin) {
  if (imp[0] == imp[1] || imp[2] <= 1e-15) return 0;
  double t = (pos - margin) / imp[2], x = fabs(t), pw = imp[4], mid = imp[3], dy;
  if (x >= 1 || x <= 0) return 0;
  if (pw == 1) dy = 1;
  else if (x <= mid) dy = pw * pow(x, pw - 1) / pow(mid, pw - 1);
  else dy = pw * pow(1 - x, pw - 1) / pow(1 - mid, pw - 1);
  return (imp[1] - imp[0]) * dy * (t < 0 ? -1 : 1) / imp[2];
}

// Dof i's rows in their zones (rollout_step.h): Delta_i and r_i, and the derivatives of
// r_i - Delta_i a_i with a held, along q_i (*rq) and qd_i (*rv). A quadratic row s adds
// D (cs aref - a_i) with cs its sign (the upper limit's -1): friction loss aref = -B qd, D fixed;
// a limit at distance dist = cs (q - its end), aref = -B cs qd - K imp (dist - margin), D = imp /
// ((1 - imp) diagApprox), imp = imp(dist). A linear row's force is a constant.
static void row_terms(const cfd_rollout_params* p, const double* rs, int i, double xi, double ai,
                      double* delta, double* r, double* rq, double* rv) {
  int n = p->n;
#define RR(k) rs[(long)(k) * n + i]  // (rollout_step.h's CFD_RR at stride 1)
  const double* P = p->rows + CFD_RP_COUNT * i;
  cfd_rollout_rows_dof(p, rs, 1, i, r, delta);
  *rq = *rv = 0;
  for (int sl = 0; sl < 3; sl++) {
    double D = RR(9 + sl), cs = sl == 2 ? -1 : 1;
    if (D == 0 || (int)RR(sl) != 1) continue;
    if (sl == 0) {
      *rv += -D * P[CFD_RP_FB];
      continue;
    }
    double dist = sl == 2 ? P[CFD_RP_HI] - xi : xi - P[CFD_RP_LO], margin = P[CFD_RP_MARGIN];
    double imp = cfd_rollout_impedance(P + CFD_RP_IMP, dist, margin);
    double dimp = impedance_slope(P + CFD_RP_IMP, dist, margin) * cs;  // along q_i
    double R = (1 - imp) * P[CFD_RP_DIAG] / imp;
    double dD = R > 1e-15 ? dimp / ((1 - imp) * (1 - imp) * P[CFD_RP_DIAG]) : 0;
    double daref = -P[CFD_RP_K] * (dimp * (dist - margin) + imp * cs);
    *rq += dD * (cs * RR(6 + sl) - ai) + D * cs * daref;
    *rv += -D * P[CFD_RP_B];  // D cs (-B cs)
  }
#undef RR
}

// Joint equality e (rollout_step.h: always quadratic, j = e1 + g e2, g = -p'(q2 - ref2), aref =
// -B (qd1 + g qd2) - K imp pos, D = imp / ((1 - imp) diagApprox), imp = imp(pos)) at a held: its
// force f = D (aref - j . a), and the derivatives of its generalized force f j along q1, q2, qd1,
// qd2 as the coefficients of j (*t: 4) and, along q2, the extra f dj/dq2 = -f p'' on dof 2 (*t2)
static void eq_terms(const cfd_rollout_params* p, const double* rs, int e, const double* x,
                     const double* a, double* f, double t[4], double* t2) {
  int n = p->n;
  const double* E = p->eqs + CFD_EP_COUNT * e;
  const double* cf = E + CFD_EP_POLY;
  const double* RE = rs + (long)(CFD_ROLLOUT_ROW_DOUBLES + 1) * n + (long)e * (n + CFD_ROLLOUT_EQ_SCALARS);
  long i1 = (long)E[CFD_EP_DOF1], i2 = (long)E[CFD_EP_DOF2];
  double D = RE[0], aref = RE[1], g = RE[2], v2 = i2 >= 0 ? x[n + i2] : 0, a2 = i2 >= 0 ? a[i2] : 0;
  double dif = i2 >= 0 ? x[i2] - E[CFD_EP_REF2] : 0, pos, pp = 0;
  if (i2 >= 0) {
    pos = x[i1] - E[CFD_EP_REF1] - cf[0] -
          (cf[1] * dif + cf[2] * dif * dif + cf[3] * dif * dif * dif + cf[4] * dif * dif * dif * dif);
    pp = 2 * cf[2] + 6 * cf[3] * dif + 12 * cf[4] * dif * dif;  // p''
  } else {
    pos = x[i1] - E[CFD_EP_REF1] - cf[0];
  }
  double imp = cfd_rollout_impedance(E + CFD_EP_IMP, pos, 0), dimp = impedance_slope(E + CFD_EP_IMP, pos, 0);
  double R = (1 - imp) * E[CFD_EP_DIAG] / imp, dDdimp = R > 1e-15 ? 1 / ((1 - imp) * (1 - imp) * E[CFD_EP_DIAG]) : 0;
  double c = aref - (a[i1] + (i2 >= 0 ? g * a2 : 0)), K = E[CFD_EP_K], B = E[CFD_EP_B];
  *f = D * c;
  // along q1 (dpos = 1) and q2 (dpos = g, dg = -p'', so dvel = -p'' qd2 and d(j . a) = -p'' a2)
  double dD1 = dDdimp * dimp, dD2 = dDdimp * dimp * g;
  t[0] = dD1 * c + D * (-K * (dimp * pos + imp));
  t[1] = i2 >= 0 ? dD2 * c + D * (-B * (-pp * v2) - K * (dimp * g * pos + imp * g) + pp * a2) : 0;
  t[2] = -D * B;
  t[3] = i2 >= 0 ? -D * B * g : 0;
  *t2 = i2 >= 0 ? -*f * pp : 0;
}

// As solve (below) with the model's constraint rows (limits, friction loss), on the CPU: the
// rollouts' solver finds the zones at the state; in them the constrained acceleration a solves
//   (M + Delta) a = tau - bias + r,
// Delta and r the quadratic rows' D and D cs aref and the linear rows' forces (joint rows: J is
// constant, so only D and aref move with the state, along their own dof), and
//   (M + Delta) da/dx = d tau/dx - d ID(q, qd, a)/dx + d(r - Delta a)/dx |a held.
// The step then solves (M + diag) qacc = tau - bias + (r - Delta a) as mj_Euler and
// mj_implicitfast add qfrc_constraint, differentiated the same way with d(r - Delta a)/dx now
// less Delta da/dx. (The zones are held: a state on a zone's edge has a one-sided derivative.)
static int solve_rows(chainfd_deriv* dv, const double* u, int step, double* qacc, double* Dq,
                      double* Dv, double* Du, char* err, int err_size) {
  int n = dv->n, nu = dv->nu, cols = 2 * n + nu, st;
  cfd_deriv_scratch* s = &dv->s;
  const cfd_chain* c = dv->c;
  const cfd_rollout_params* p = dv->p;
  const double* v = dv->x + n;
  double *M0 = dv->rows, *dA = M0 + (size_t)n * n, *delta = dA + (size_t)n * cols;
  double *rr = delta + n, *rq = rr + n, *rv = rq + n, *a = rv + n, *eq = a + n;
  const double* RE = NULL;  // the equalities' D, aref, g (rollout_step.h's CFD_RE)
  cfd_deriv_applied(p, dv->x, v, u, step, s);
  const double* rs = cfd_rollout_cpu_rows(dv->r, dv->x, u, &st);
  if (st) return fail(err, err_size, "derivatives: the joint-space system is singular");
  cfd_idd_forward(c, s->q, v, NULL, s->w, s->bias);
  cfd_idd_composites(c, s->w, s->cw);
  cfd_idd_mass(c, s->w, s->cw, M0);
  for (int i = 0; i < n; i++) {
    delta[i] = rr[i] = 0;
    if (rs) cfd_rollout_rows_dof(p, rs, 1, i, &rr[i], &delta[i]);
  }
  // the constrained acceleration and its derivatives; the equalities join M as D j j^T and the
  // right-hand side as D aref j
  memcpy(s->M, M0, sizeof(double) * n * n);
  for (int i = 0; i < n; i++) s->M[n * i + i] += c->armature[i] + delta[i];
  for (int i = 0; i < n; i++) a[i] = s->tau[i] - s->bias[i] + rr[i];
  if (rs) RE = rs + (long)(CFD_ROLLOUT_ROW_DOUBLES + 1) * n;
  for (int e = 0; e < p->neq; e++) {
    const double* R = RE + (long)e * (n + CFD_ROLLOUT_EQ_SCALARS);
    long i1 = (long)p->eqs[CFD_EP_COUNT * e + CFD_EP_DOF1], i2 = (long)p->eqs[CFD_EP_COUNT * e + CFD_EP_DOF2];
    double D = R[0], g = i2 >= 0 ? R[2] : 0;
    s->M[n * i1 + i1] += D;
    a[i1] += D * R[1];
    if (i2 >= 0) {
      s->M[n * i1 + i2] += D * g, s->M[n * i2 + i1] += D * g, s->M[n * i2 + i2] += D * g * g;
      a[i2] += D * R[1] * g;
    }
  }
  if (cfd_chol_factor(s->M, n, n)) return fail(err, err_size, "derivatives: the joint-space system is singular");
  cfd_deriv_chol_solve_rows(s->M, n, a, 0, 1, 1, s->inv);
  for (int i = 0; i < n; i++) {
    double d0, r0;
    if (rs) row_terms(p, rs, i, dv->x[i], a[i], &d0, &r0, &rq[i], &rv[i]);
    else rq[i] = rv[i] = 0;
  }
  for (int e = 0; e < p->neq; e++) eq_terms(p, rs, e, dv->x, a, &eq[6 * e], &eq[6 * e + 1], &eq[6 * e + 5]);
  int diag = 0;  // the step's system differs (diag) or its control term does (ddiag)
  for (int i = 0; i < n; i++) diag |= s->diag[i] != 0;
  for (int k = 0; k < nu; k++) diag |= s->ddiag[k] != 0;
  for (int pass = 0; pass < 1 + (step && diag); pass++) {
    const double* acc = a;
    if (pass) {  // the step's system: M + diag, the constraint force r - Delta a added
      memcpy(s->M, M0, sizeof(double) * n * n);
      for (int i = 0; i < n; i++) s->M[n * i + i] += c->armature[i] + s->diag[i];
      if (cfd_chol_factor(s->M, n, n)) return fail(err, err_size, "derivatives: the joint-space system is singular");
      for (int i = 0; i < n; i++) s->qacc[i] = s->tau[i] - s->bias[i] + rr[i] - delta[i] * a[i];
      for (int e = 0; e < p->neq; e++) {  // + f j
        const double* R = RE + (long)e * (n + CFD_ROLLOUT_EQ_SCALARS);
        long i1 = (long)p->eqs[CFD_EP_COUNT * e + CFD_EP_DOF1], i2 = (long)p->eqs[CFD_EP_COUNT * e + CFD_EP_DOF2];
        s->qacc[i1] += eq[6 * e];
        if (i2 >= 0) s->qacc[i2] += eq[6 * e] * R[2];
      }
      cfd_deriv_chol_solve_rows(s->M, n, s->qacc, 0, 1, 1, s->inv);
      acc = s->qacc;
    }
    cfd_idd_accel(c, v, acc, s->w, NULL);
    memset(s->X, 0, sizeof(double) * n * cols);
    cfd_idd_jacobians(c, s->w, s->cw, -1, s->X, s->X + n, cols, s->sub);
    for (int i = 0; i < n; i++) {
      s->X[cols * i + i] += s->dq[i] + rq[i];
      s->X[cols * i + n + i] += s->dv[i] + rv[i];
      for (int k = 0; k < nu; k++) s->X[cols * i + 2 * n + k] = s->du[i * nu + k];
    }
    for (int e = 0; e < p->neq; e++) {  // the equalities' f j along q1, q2, qd1, qd2, a held
      const double* R = RE + (long)e * (n + CFD_ROLLOUT_EQ_SCALARS);
      const double* t = &eq[6 * e + 1];
      long i1 = (long)p->eqs[CFD_EP_COUNT * e + CFD_EP_DOF1], i2 = (long)p->eqs[CFD_EP_COUNT * e + CFD_EP_DOF2];
      long col[4] = {i1, i2, n + i1, n + i2};
      for (int k = 0; k < (i2 >= 0 ? 4 : 3); k += (i2 >= 0 ? 1 : 2)) {
        s->X[cols * i1 + col[k]] += t[k];
        if (i2 >= 0) s->X[cols * i2 + col[k]] += t[k] * R[2];
      }
      if (i2 >= 0) s->X[cols * i2 + i2] += eq[6 * e + 5];
    }
    if (pass) {
      for (int k = 0; k < nu; k++) s->X[cols * p->act_dof[k] + 2 * n + k] -= s->ddiag[k] * acc[p->act_dof[k]];
      for (int i = 0; i < n; i++)
        for (int k = 0; k < cols; k++) s->X[cols * i + k] -= delta[i] * dA[cols * i + k];
      for (int e = 0; e < p->neq; e++) {  // - D j j^T da/dx
        const double* R = RE + (long)e * (n + CFD_ROLLOUT_EQ_SCALARS);
        long i1 = (long)p->eqs[CFD_EP_COUNT * e + CFD_EP_DOF1], i2 = (long)p->eqs[CFD_EP_COUNT * e + CFD_EP_DOF2];
        double D = R[0], g = i2 >= 0 ? R[2] : 0;
        for (int k = 0; k < cols; k++) {
          double ja = dA[cols * i1 + k] + (i2 >= 0 ? g * dA[cols * i2 + k] : 0);
          s->X[cols * i1 + k] -= D * ja;
          if (i2 >= 0) s->X[cols * i2 + k] -= D * g * ja;
        }
      }
    }
    cfd_deriv_chol_solve_rows(s->M, n, s->X, 0, cols, cols, s->inv);
    if (!pass) memcpy(dA, s->X, sizeof(double) * n * cols);
  }
  const double* acc = step && diag ? s->qacc : a;
  for (int i = 0; i < n; i++) {
    if (qacc) qacc[i] = acc[i];
    for (int j = 0; j < n; j++) {
      if (Dq) Dq[(size_t)n * i + j] = s->X[(size_t)cols * i + j];
      if (Dv) Dv[(size_t)n * i + j] = s->X[(size_t)cols * i + n + j];
    }
    for (int k = 0; k < nu && Du; k++) Du[(size_t)nu * i + k] = s->X[(size_t)cols * i + 2 * n + k];
  }
  return 0;
}

// (M + diag) qacc = tau - bias and its derivatives (deriv_instance.h) at the state in dv->x:
// qacc (n), DqDq, DqDv (n x n) and DqDu (n x nu), row-major, any NULL
static int solve(chainfd_deriv* dv, const double* u, int step, double* qacc, double* Dq,
                 double* Dv, double* Du, char* err, int err_size) {
  if (dv->rows) return solve_rows(dv, u, step, qacc, Dq, Dv, Du, err, err_size);
  int n = dv->n, nu = dv->nu, cols = 2 * n + nu;
  cfd_deriv_scratch* s = &dv->s;
  cfd_deriv_applied(dv->p, dv->x, dv->x + n, u, step, s);
  if (cfd_deriv_solve(dv->c, dv->p, dv->x + n, Dq != NULL, Dv != NULL, Du != NULL, s))
    return fail(err, err_size, "derivatives: the joint-space system is singular");
  for (int i = 0; i < n; i++) {
    if (qacc) qacc[i] = s->qacc[i];
    for (int j = 0; j < n; j++) {
      if (Dq) Dq[(size_t)n * i + j] = s->X[(size_t)cols * i + j];
      if (Dv) Dv[(size_t)n * i + j] = s->X[(size_t)cols * i + n + j];
    }
    for (int a = 0; a < nu && Du; a++) Du[(size_t)nu * i + a] = s->X[(size_t)cols * i + 2 * n + a];
  }
  return 0;
}

// The first dof whose limit row is active at the state x (rollout_step.h's test), or -1; always
// -1 where the constrained derivatives are taken (a CPU context, solve_rows)
static int at_limit(const chainfd_deriv* dv, const double* x) {
  for (int i = 0; i < dv->n && dv->p->rows && !dv->rows; i++) {
    const double* P = dv->p->rows + CFD_RP_COUNT * i;
    if (P[CFD_RP_LIMITED] && (x[i] - P[CFD_RP_LO] < P[CFD_RP_MARGIN] || P[CFD_RP_HI] - x[i] < P[CFD_RP_MARGIN]))
      return i;
  }
  return -1;
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
  int i = at_limit(dv, dv->x);
  if (i >= 0) {
    char b[128];
    return fail(err, err_size, "derivatives: joint %s is at its limit (an active constraint row: "
                "a GPU context's derivatives of the constrained step are not done yet)",
                elem(m, mjOBJ_JOINT, dv->c->jnt[i], b, sizeof b));
  }
  return 0;
}

int chainfd_deriv_qacc(chainfd_deriv* dv, const mjModel* m, const mjData* d, double* qacc,
                       double* DqDq, double* DqDv, double* DqDu, char* err, int err_size) {
  if (load(dv, m, d, err, err_size)) return 1;
  return solve(dv, d->ctrl, 0, qacc, DqDq, DqDv, DqDu, err, err_size);
}

// One step of semi-implicit Euler (mj_Euler, mj_implicitSkip with a diagonal qDeriv): with the
// step's acceleration a (the joint diagonal D in its system), v' = v + h a and q' = q + h v', so
//   A = [[I + h^2 a_q, h I + h^2 a_v], [h a_q, I + h a_v]],   B = [[h^2 a_u], [h a_u]]
// RK4 (mj_RungeKutta's four stages, its tableau; each stage's qacc without an integrator's
// diagonal): X_0 = x, X_k = x + h c_k F_{k-1} (c = 1/2, 1/2, 1), F_k = (v_k, a(X_k)),
// x' = x + h/6 (F_0 + 2 F_1 + 2 F_2 + F_3), differentiated stage by stage in (x, u):
//   dF_k = [[0, I], [a_q, a_v]] dX_k + [0; a_u] du,   dX_k = [I 0] + h c_k dF_{k-1}
static int rk4_transition(chainfd_deriv* dv, const double* u, double* A, double* B, char* err,
                          int err_size) {
  int n = dv->n, nu = dv->nu, nx = 2 * n, cols = nx + nu, st = 0;
  double h = dv->p->h;
  static const double c[3] = {0.5, 0.5, 1}, w[4] = {1.0 / 6, 2.0 / 6, 2.0 / 6, 1.0 / 6};
  size_t big = (size_t)nx * cols;
  double *dX = dv->trans, *dF = dX + big, *sum = dF + big, *x0 = sum + big, *X = x0 + nx;
  double *F = X + nx, *qacc = F + nx, *Dq = qacc + nx, *Dv = Dq + (size_t)n * n;
  double* Du = Dv + (size_t)n * n;
  memset(dX, 0, sizeof(double) * big);
  memset(sum, 0, sizeof(double) * big);
  memcpy(x0, dv->x, sizeof(double) * nx);
  memcpy(X, x0, sizeof(double) * nx);
  for (int i = 0; i < nx; i++) dX[(size_t)cols * i + i] = 1;
  for (int k = 0; k < 4 && !st; k++) {
    memcpy(dv->x, X, sizeof(double) * nx);
    if (at_limit(dv, X) >= 0) {
      st = fail(err, err_size, "derivatives: RK4 stage %d reaches a joint limit (an active "
                "constraint row)", k);
      break;
    }
    if ((st = solve(dv, u, 0, qacc, Dq, Dv, nu ? Du : NULL, err, err_size))) break;
    for (int i = 0; i < n; i++) F[i] = X[n + i], F[n + i] = qacc[i];
    for (int i = 0; i < n; i++)
      for (int j = 0; j < cols; j++) {
        dF[(size_t)cols * i + j] = dX[(size_t)cols * (n + i) + j];  // d v_k
        double a = j >= nx ? Du[(size_t)nu * i + j - nx] : 0;     // d a_k
        for (int l = 0; l < n; l++)
          a += Dq[(size_t)n * i + l] * dX[(size_t)cols * l + j] + Dv[(size_t)n * i + l] * dX[(size_t)cols * (n + l) + j];
        dF[(size_t)cols * (n + i) + j] = a;
      }
    for (size_t e = 0; e < big; e++) sum[e] += w[k] * dF[e];
    if (k == 3) break;
    for (int i = 0; i < nx; i++) X[i] = x0[i] + h * c[k] * F[i];
    for (int i = 0; i < nx; i++)
      for (int j = 0; j < cols; j++) dX[(size_t)cols * i + j] = (i == j) + h * c[k] * dF[(size_t)cols * i + j];
  }
  for (int i = 0; i < nx && !st; i++) {
    for (int j = 0; j < nx && A; j++) A[(size_t)nx * i + j] = (i == j) + h * sum[(size_t)cols * i + j];
    for (int a = 0; a < nu && B; a++) B[(size_t)nu * i + a] = h * sum[(size_t)cols * i + nx + a];
  }
  memcpy(dv->x, x0, sizeof(double) * nx);
  return st;
}

// A ball's position rows of the step (mj_integratePos: the quaternion times exp(t), t = h v' the
// new velocity's rotation, both tangents in the body's frame): perturbing the body by d and the
// new velocity by dv' moves the result by R(t)^T d + J(t) h dv', J the right Jacobian of SO(3),
// J(t) = I - (1 - cos|t|)/|t|^2 t^ + (|t| - sin|t|)/|t|^3 t^^. Rt: R(t)^T, J: J(t), row-major 3x3
static void ball_step_jacobians(const double t[3], double Rt[9], double J[9]) {
  double a = sqrt(t[0] * t[0] + t[1] * t[1] + t[2] * t[2]), k1, k2;
  if (a < 1e-4) k1 = 0.5 - a * a / 24, k2 = 1.0 / 6 - a * a / 120;  // (series)
  else k1 = (1 - cos(a)) / (a * a), k2 = (a - sin(a)) / (a * a * a);
  double T[9] = {0, -t[2], t[1], t[2], 0, -t[0], -t[1], t[0], 0}, T2[9], R[9];
  cfd_mat3_mul(T, T, T2);
  double s0 = a < 1e-4 ? 1 - a * a / 6 : sin(a) / a;  // R = I + sin/|t| t^ + (1 - cos)/|t|^2 t^^
  for (int r = 0; r < 9; r++) {
    double id = r % 4 == 0;
    R[r] = id + s0 * T[r] + k1 * T2[r];
    J[r] = id - k1 * T[r] + k2 * T2[r];
  }
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 3; c++) Rt[3 * r + c] = R[3 * c + r];
}

int chainfd_transition_derivatives(chainfd_deriv* dv, const mjModel* m, const mjData* d,
                                   double* A, double* B, char* err, int err_size) {
  if (load(dv, m, d, err, err_size)) return 1;
  if (dv->rk4) return rk4_transition(dv, d->ctrl, A, B, err, err_size);
  int n = dv->n, nu = dv->nu, nx = 2 * n;
  double h = dv->p->h;
  double *Dq = dv->trans, *Dv = Dq + (size_t)n * n, *Du = Dv + (size_t)n * n, *qacc = Du + (size_t)n * nu;
  int st = solve(dv, d->ctrl, 1, qacc, Dq, Dv, Du, err, err_size);
  // the velocity rows, v' = v + h a; the position rows q' = q + h v' (a ball's: below)
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
  for (int g = 0; g < n && !st; g++) {  // balls (and free joints' rotations): R^T d + J h dv'
    if (dv->c->kind[g] != CFD_LINK_BALL) continue;
    double t[3], Rt[9], J[9];
    for (int k = 0; k < 3; k++) t[k] = h * (dv->x[n + g + k] + h * qacc[g + k]);
    ball_step_jacobians(t, Rt, J);
    for (int r = 0; r < 3; r++) {
      for (int col = 0; col < nx && A; col++) {
        double s = 0;  // (J h dv'/dx)[r][col]; dv'/dx's rows are A's rows n + g + k
        for (int k = 0; k < 3; k++) s += J[3 * r + k] * h * A[(size_t)nx * (n + g + k) + col];
        if (col >= g && col < g + 3) s += Rt[3 * r + col - g];
        A[(size_t)nx * (g + r) + col] = s;
      }
      for (int a = 0; a < nu && B; a++) {
        double s = 0;
        for (int k = 0; k < 3; k++) s += J[3 * r + k] * h * B[(size_t)nu * (n + g + k) + a];
        B[(size_t)nu * (g + r) + a] = s;
      }
    }
  }
  return st;
}

int cfd_deriv_reference_qacc(chainfd_deriv* dv, const mjModel* m, const mjData* d, double* qacc,
                             char* err, int err_size) {
  if (load(dv, m, d, err, err_size)) return 1;
  cfd_deriv_applied(dv->p, dv->x, dv->x + dv->n, d->ctrl, 0, &dv->s);
  int st = cfd_fd_reference(dv->c, dv->s.q, dv->x + dv->n, dv->s.tau, NULL, qacc);
  return st ? fail(err, err_size, "derivatives: the reference failed: %s", cfd_status_str(st)) : 0;
}

int chainfd_deriv_batch(chainfd_deriv* dv, int B, const double* x, const double* u, double* DqDq,
                        double* DqDv, double* DqDu, chainfd_memory where, char* err, int err_size) {
  int n = dv->n, nu = dv->nu;
  if (B < 1) return fail(err, err_size, "derivatives: a batch of %d states", B);
  if (!x) return fail(err, err_size, "derivatives: no states (x is NULL)");
  if (dv->device >= 0)
    return cfd_gpu_deriv_batch(cfd_rollout_gpu(dv->r), B, x, u, DqDq, DqDv, DqDu, (cfd_memory)where,
                               err, err_size);
  if (where != CHAINFD_HOST)
    return fail(err, err_size, "derivatives: a CPU context takes host arrays");
  size_t nn = (size_t)n * n, nnu = (size_t)n * nu;
  for (int b = 0; b < B; b++) {
    const double* xb = x + (size_t)b * 2 * n;
    for (int k = 0; k < 2 * n; k++)
      if (!isfinite(xb[k])) return fail(err, err_size, "derivatives: instance %d: x[%d] is not finite", b, k);
    for (int a = 0; u && a < nu; a++)
      if (!isfinite(u[(size_t)b * nu + a]))
        return fail(err, err_size, "derivatives: instance %d: u[%d] is not finite", b, a);
    if (at_limit(dv, xb) >= 0)
      return fail(err, err_size, "derivatives: instance %d: a joint at its limit (an active "
                  "constraint row: the derivatives of the constrained step are not done yet)", b);
    memcpy(dv->x, xb, sizeof(double) * 2 * n);
    if (solve(dv, u ? u + (size_t)b * nu : NULL, 0, NULL, DqDq ? DqDq + b * nn : NULL,
              DqDv ? DqDv + b * nn : NULL, DqDu ? DqDu + b * nnu : NULL, err, err_size))
      return fail(err, err_size, "derivatives: instance %d: the joint-space system is singular", b);
  }
  return 0;
}
