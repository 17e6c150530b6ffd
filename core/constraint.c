// MuJoCo's constrained acceleration by Newton's method, M never formed (constraint.h).
#include "constraint.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfd_math.h"
#include "chain.h"
#include "mj_chain.h"

struct cfd_csolver {
  cfd_chain chain;     // m's chain with gravity zero: its forward dynamics at qd = 0 is M^-1 tau
  double* fast_work;   // cpu.fast's prepared form of it and scratch
  double* id_work;
  int n;
  // per solve, grown to the rows' count
  int cap;
  double *J, *Y, *A, *S;  // k x n, k x n, k x k, k x k
  double* rows;           // k x 6: x, f, Jd, and scratch
  int *zone, *prev, *act;
  double* breaks;         // 2k
  double* vec;            // 8 n
};

void cfd_csolver_free(cfd_csolver* cs) {
  if (!cs) return;
  cfd_chain_free(&cs->chain);
  free(cs->fast_work); free(cs->id_work);
  free(cs->J); free(cs->Y); free(cs->A); free(cs->S); free(cs->rows);
  free(cs->zone); free(cs->prev); free(cs->act); free(cs->breaks); free(cs->vec);
  free(cs);
}

cfd_csolver* cfd_csolver_create(const mjModel* m, char* err, int err_size) {
  cfd_csolver* cs = calloc(1, sizeof(*cs));
  if (!cs) { snprintf(err, err_size, "out of memory"); return NULL; }
  if (cfd_chain_from_model(m, &cs->chain, err, err_size)) { free(cs); return NULL; }
  int n = cs->n = cs->chain.n;
  for (int k = 0; k < 3; k++) cs->chain.gravity[k] = 0;
  cs->fast_work = malloc(sizeof(double) * cfd_fast_work_size(n));
  cs->id_work = malloc(sizeof(double) * cfd_id_work_size(n));
  cs->vec = malloc(sizeof(double) * 8 * (size_t)n);
  if (!cs->fast_work || !cs->id_work || !cs->vec) {
    snprintf(err, err_size, "out of memory for a chain of %d links", n);
    cfd_csolver_free(cs);
    return NULL;
  }
  cfd_fast_prepare(&cs->chain, cs->fast_work);  // (nonzero: the solves take the tree sweeps)
  return cs;
}

static int grow(cfd_csolver* cs, int k) {
  if (k <= cs->cap) return 0;
  size_t n = (size_t)cs->n, kk = (size_t)k;
  free(cs->J); free(cs->Y); free(cs->A); free(cs->S); free(cs->rows);
  free(cs->zone); free(cs->prev); free(cs->act); free(cs->breaks);
  cs->J = malloc(sizeof(double) * kk * n);
  cs->Y = malloc(sizeof(double) * kk * n);
  cs->A = malloc(sizeof(double) * kk * kk);
  cs->S = malloc(sizeof(double) * kk * kk);
  cs->rows = malloc(sizeof(double) * 6 * kk);
  cs->zone = malloc(sizeof(int) * kk);
  cs->prev = malloc(sizeof(int) * kk);
  cs->act = malloc(sizeof(int) * kk);
  cs->breaks = malloc(sizeof(double) * 2 * kk);
  cs->cap = cs->J && cs->Y && cs->A && cs->S && cs->rows && cs->zone && cs->prev && cs->act &&
                    cs->breaks ? k : 0;
  return cs->cap ? 0 : 1;
}

// A row's zone at x = J_i a - aref_i, and its force -s'(x) (constraint.h's s_i)
enum { Z_FREE = mjCNSTRSTATE_SATISFIED, Z_QUAD = mjCNSTRSTATE_QUADRATIC,
       Z_NEG = mjCNSTRSTATE_LINEARNEG, Z_POS = mjCNSTRSTATE_LINEARPOS };

static int row_zone(int type, double x, double R, double fl) {
  switch (type) {
    case mjCNSTR_EQUALITY: return Z_QUAD;
    case mjCNSTR_FRICTION_DOF:
    case mjCNSTR_FRICTION_TENDON:
      return x <= -R * fl ? Z_NEG : x >= R * fl ? Z_POS : Z_QUAD;
    default: return x < 0 ? Z_QUAD : Z_FREE;  // limits, frictionless and pyramidal contacts
  }
}

static double row_force(int zone, double x, double D, double fl) {
  return zone == Z_QUAD ? -D * x : zone == Z_NEG ? fl : zone == Z_POS ? -fl : 0;
}

static double dot(const double* a, const double* b, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

// phi'(alpha) along the direction: dMe + alpha dMd - sum_i Jd_i f_i(x_i + alpha Jd_i), and the
// slope of that (phi''), from the rows' zones at alpha
static void line_slope(const mjData* d, int k, const double* x, const double* Jd, double dMe,
                       double dMd, double alpha, double* g, double* h) {
  double gs = dMe + alpha * dMd, hs = dMd;
  for (int i = 0; i < k; i++) {
    if (Jd[i] == 0) continue;
    double xi = x[i] + alpha * Jd[i];
    int z = row_zone(d->efc_type[i], xi, d->efc_R[i], d->efc_frictionloss[i]);
    gs -= Jd[i] * row_force(z, xi, d->efc_D[i], d->efc_frictionloss[i]);
    if (z == Z_QUAD) hs += d->efc_D[i] * Jd[i] * Jd[i];
  }
  *g = gs;
  *h = hs;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

// The exact minimiser of phi along the direction: phi' is piecewise linear and nondecreasing, its
// pieces ending where a row changes zone; walk the pieces in order to the one holding the root.
static double line_search(cfd_csolver* cs, const mjData* d, int k, const double* x,
                          const double* Jd, double dMe, double dMd) {
  int nb = 0;
  for (int i = 0; i < k; i++) {
    if (Jd[i] == 0) continue;
    int t = d->efc_type[i];
    double Rf = d->efc_R[i] * d->efc_frictionloss[i];
    if (t == mjCNSTR_EQUALITY) continue;
    if (t == mjCNSTR_FRICTION_DOF || t == mjCNSTR_FRICTION_TENDON) {
      double a1 = (-Rf - x[i]) / Jd[i], a2 = (Rf - x[i]) / Jd[i];
      if (a1 > 0) cs->breaks[nb++] = a1;
      if (a2 > 0) cs->breaks[nb++] = a2;
    } else {
      double a0 = -x[i] / Jd[i];
      if (a0 > 0) cs->breaks[nb++] = a0;
    }
  }
  qsort(cs->breaks, (size_t)nb, sizeof(double), cmp_double);
  double lo = 0;
  for (int b = 0; b <= nb; b++) {
    double hi = b < nb ? cs->breaks[b] : INFINITY;
    // phi' on (lo, hi) is linear: evaluate inside the piece, where every zone is settled
    double mid = b < nb ? 0.5 * (lo + hi) : lo + 1;
    double g, h;
    line_slope(d, k, x, Jd, dMe, dMd, mid, &g, &h);
    double root = mid - g / h;  // (h >= dMd > 0)
    if (root <= hi) return root > lo ? root : lo;
    lo = hi;
  }
  return lo;
}

int cfd_csolver_solve(cfd_csolver* cs, const mjModel* m, const mjData* d, const double* qacc_smooth,
                      const cfd_csolve_opt* opt, double* qacc, double* efc_force,
                      cfd_csolve_stats* stats, char* err, int err_size) {
  int n = cs->n, k = (int)d->nefc;
  cfd_csolve_stats st = {0};
  if (err_size > 0) err[0] = 0;
  if (n != m->nv) {
    snprintf(err, err_size, "the constraint solver was made for %d dofs, the model has %d", n,
             (int)m->nv);
    return 1;
  }
  for (int i = 0; i < k; i++)
    if (d->efc_type[i] == mjCNSTR_CONTACT_ELLIPTIC) {
      int b1 = m->geom_bodyid[d->contact[d->efc_id[i]].geom[0]];
      int b2 = m->geom_bodyid[d->contact[d->efc_id[i]].geom[1]];
      char n1[128], n2[128];
      snprintf(err, err_size, "the contact between bodies %s and %s has an elliptic friction cone: "
               "chainfd's solver takes pyramidal cones (opt.cone)",
               cfd_mj_name(m, mjOBJ_BODY, b1, n1, sizeof n1),
               cfd_mj_name(m, mjOBJ_BODY, b2, n2, sizeof n2));
      return 1;
    }
  if (grow(cs, k)) { snprintf(err, err_size, "out of memory for %d constraint rows", k); return 1; }
  double *q = cs->vec, *zero = q + n, *e = zero + n, *Me = e + n, *u = Me + n, *dir = u + n,
         *Md = dir + n, *grad = Md + n;
  double *J = cs->J, *Y = cs->Y, *A = cs->A;
  double *x = cs->rows, *f = x + k, *Jd = f + k, *r = Jd + k, *z = r + k;
  cfd_chain_q_from_qpos(&cs->chain, d->qpos, q);
  for (int j = 0; j < n; j++) zero[j] = 0;
  // J dense (rows of MuJoCo's sparse or dense Jacobian), Y = M^-1 J^T row by row, A = J Y^T
  int sparse = mj_isSparse(m);
  for (int i = 0; i < k; i++) {
    double* Ji = J + (size_t)i * n;
    if (sparse) {
      for (int j = 0; j < n; j++) Ji[j] = 0;
      int adr = d->efc_J_rowadr[i];
      for (int t = 0; t < d->efc_J_rownnz[i]; t++) Ji[d->efc_J_colind[adr + t]] = d->efc_J[adr + t];
    } else {
      memcpy(Ji, d->efc_J + (size_t)i * n, sizeof(double) * n);
    }
    int s = cfd_fd_fast_prepared(&cs->chain, q, zero, Ji, NULL, Y + (size_t)i * n, cs->fast_work);
    if (s) {
      snprintf(err, err_size, "M^-1 for constraint row %d: %s", i, cfd_status_str(s));
      return 1;
    }
  }
  for (int i = 0; i < k; i++)
    for (int j = 0; j <= i; j++)
      A[(size_t)i * k + j] = A[(size_t)j * k + i] = dot(J + (size_t)i * n, Y + (size_t)j * n, n);
  double scale = 1 / (m->stat.meaninertia * (n > 1 ? n : 1));
  memcpy(qacc, qacc_smooth, sizeof(double) * n);
  for (int j = 0; j < n; j++) e[j] = Me[j] = 0;
  for (int i = 0; i < k; i++) cs->prev[i] = -1;
  int status = 1;
  for (st.iterations = 0;; st.iterations++) {
    // the rows at qacc: x, zones, forces; the gradient M e - J^T f
    int same = 1, na = 0;
    for (int i = 0; i < k; i++) {
      x[i] = dot(J + (size_t)i * n, qacc, n) - d->efc_aref[i];
      int zi = row_zone(d->efc_type[i], x[i], d->efc_R[i], d->efc_frictionloss[i]);
      f[i] = row_force(zi, x[i], d->efc_D[i], d->efc_frictionloss[i]);
      same &= zi == cs->prev[i];
      cs->zone[i] = cs->prev[i] = zi;
      if (zi == Z_QUAD) cs->act[na++] = i;
    }
    for (int j = 0; j < n; j++) grad[j] = Me[j];
    for (int i = 0; i < k; i++)
      if (f[i] != 0)
        for (int j = 0; j < n; j++) grad[j] -= J[(size_t)i * n + j] * f[i];
    st.gradient = sqrt(dot(grad, grad, n)) * scale;
    st.active = na;
    // converged: a small gradient, or a step that kept every zone. A row's x moves linearly along
    // the step, so zones equal at both ends are equal all along it: the step stayed on one piece
    // of the cost, a quadratic, whose minimiser along the Newton direction is its minimiser.
    if (st.gradient < opt->tol || same) { status = 0; break; }
    if (st.iterations >= opt->max_iter) break;
    // u = M^-1 grad = e - Y^T f; the direction -(u - Y_A^T (R_A + A_AA)^-1 J_A u)
    for (int j = 0; j < n; j++) u[j] = e[j];
    for (int i = 0; i < k; i++)
      if (f[i] != 0)
        for (int j = 0; j < n; j++) u[j] -= Y[(size_t)i * n + j] * f[i];
    double* S = cs->S;
    for (int a = 0; a < na; a++) {
      int ia = cs->act[a];
      for (int b = 0; b <= a; b++) S[(size_t)a * na + b] = A[(size_t)ia * k + cs->act[b]];
      S[(size_t)a * na + a] += d->efc_R[ia];
      r[a] = dot(J + (size_t)ia * n, u, n);
    }
    if (na && cfd_chol_factor(S, na, na)) {
      snprintf(err, err_size, "the active rows' system is not positive definite");
      break;
    }
    for (int a = 0; a < na; a++) z[a] = r[a];
    if (na) cfd_chol_solve(S, na, na, z, 1, 1);
    for (int j = 0; j < n; j++) dir[j] = -u[j];
    for (int a = 0; a < na; a++)
      for (int j = 0; j < n; j++) dir[j] += Y[(size_t)cs->act[a] * n + j] * z[a];
    // M dir by inverse dynamics (no gravity, no velocity; armature added as M has it)
    cfd_id_cpu(&cs->chain, q, zero, dir, Md, cs->id_work);
    for (int j = 0; j < n; j++) Md[j] += cs->chain.armature[j] * dir[j];
    for (int i = 0; i < k; i++) Jd[i] = dot(J + (size_t)i * n, dir, n);
    double dMd = dot(dir, Md, n), dMe = dot(dir, Me, n);
    if (!(dMd > 0)) { status = 0; break; }  // no direction left: at the minimum
    double alpha = line_search(cs, d, k, x, Jd, dMe, dMd);
    for (int j = 0; j < n; j++) {
      qacc[j] += alpha * dir[j];
      e[j] += alpha * dir[j];
      Me[j] += alpha * Md[j];
    }
  }
  if (efc_force) memcpy(efc_force, f, sizeof(double) * k);
  if (stats) *stats = st;
  if (status && !err[0])
    snprintf(err, err_size, "no convergence in %d Newton steps (scaled gradient %.3g)",
             st.iterations, st.gradient);
  return status;
}
