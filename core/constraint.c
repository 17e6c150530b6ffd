// MuJoCo's constrained acceleration by Newton's method, M never formed (constraint.h).
#include "constraint.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aba_tree.h"
#include "cfd_math.h"
#include "chain.h"
#include "mj_chain.h"

// How a row enters the Hessian (constraint.h): through a body's inertia, a joint's diagonal, or
// the Woodbury identity
enum { ROW_COUPLED = 0, ROW_BODY = 1, ROW_DOF = 2 };

// The kinds of body rows contact_row_wrench builds, by the cone (pyramidal or elliptic), which
// geom's body moves (2), the contact's dim (1, 3, 4, 6) and the row's place among the contact's
// (up to 10): one rule each
#define CFD_ROW_KINDS (2 * 2 * 7 * 10)

// A point along the line search's direction where a row changes zone
typedef struct breakpoint {
  double alpha;
  int row;
} breakpoint;

struct cfd_csolver {
  cfd_chain chain;     // m's chain with gravity zero: its inverse dynamics at qd = 0 is M a
  cfd_chain aug;       // the chain's arrays but the inertias, which are H0's (constraint.h)
  int n, nbody;
  int* body_link;      // nbody: the link whose frame is the body's weld root's; -1 on the world
  // contact_row_wrench's rule checked against efc_J, by the row's kind (KIND_* below): 0 not yet,
  // 1 it holds, 2 it does not (those rows are coupled rows)
  unsigned char checked[CFD_ROW_KINDS];
  double* tree_work;   // aba_tree.h's scratch
  double* fast_work;   // cpu.fast's prepared chain: H0^-1 where no body row adds inertia
  double* pose;        // n x 12: each link's (R, p) in its parent at this solve's q
  double* link6;       // n x 6: link accelerations, or wrenches
  double* force6;      // n x 6: wrenches
  double* vec;         // 10 n
  // per row, grown to the rows' count
  int cap;
  int *kind, *link, *zone, *prev;
  double *w;           // k x 6: a body row's wrench in its link's frame; a dof row's coefficient
  double *rows;        // k x 6: x, f, Jd and scratch
  breakpoint* breaks;  // 2k: the line search's
  int* zone_ls;        // k: the line search's zones
  // the coupled rows, grown to their count
  int ccap;
  int *cidx, *cact;    // the rows' indices; the active ones among them
  double *J, *G, *Y, *S, *cz;  // kc x n (J, G: the Hessian's factor columns, Y), kc x kc, 2 kc
};

void cfd_csolver_free(cfd_csolver* cs) {
  if (!cs) return;
  free(cs->aug.inertia);
  cfd_chain_free(&cs->chain);
  free(cs->body_link); free(cs->tree_work); free(cs->fast_work); free(cs->pose); free(cs->link6);
  free(cs->force6);
  free(cs->vec);
  free(cs->kind); free(cs->link); free(cs->zone); free(cs->prev); free(cs->w); free(cs->rows);
  free(cs->breaks); free(cs->zone_ls);
  free(cs->cidx); free(cs->cact); free(cs->J); free(cs->G); free(cs->Y); free(cs->S); free(cs->cz);
  free(cs);
}

cfd_csolver* cfd_csolver_create(const mjModel* m, char* err, int err_size) {
  cfd_csolver* cs = calloc(1, sizeof(*cs));
  if (!cs) { snprintf(err, err_size, "out of memory"); return NULL; }
  if (cfd_chain_from_model(m, &cs->chain, err, err_size)) { free(cs); return NULL; }
  int n = cs->n = cs->chain.n;
  for (int k = 0; k < 3; k++) cs->chain.gravity[k] = 0;
  cs->aug = cs->chain;
  cs->aug.inertia = malloc(sizeof(double) * 36 * (size_t)n);
  cs->nbody = (int)m->nbody;
  cs->body_link = malloc(sizeof(int) * (size_t)m->nbody);
  cs->tree_work = malloc(sizeof(double) * CFD_ABA_TREE_LINK_DOUBLES * (size_t)n);
  cs->fast_work = malloc(sizeof(double) * cfd_fast_work_size(n));
  cs->pose = malloc(sizeof(double) * 12 * (size_t)n);
  cs->link6 = malloc(sizeof(double) * 6 * (size_t)n);
  cs->force6 = malloc(sizeof(double) * 6 * (size_t)n);
  cs->vec = malloc(sizeof(double) * 10 * (size_t)n);
  if (!cs->aug.inertia || !cs->body_link || !cs->tree_work || !cs->fast_work ||
      !cs->pose || !cs->link6 || !cs->force6 || !cs->vec) {
    snprintf(err, err_size, "out of memory for a chain of %d links", n);
    cfd_csolver_free(cs);
    return NULL;
  }
  // a body's frame is that of the last link made from it (its joints' links end there)
  cfd_fast_prepare(&cs->chain, cs->fast_work);  // (nonzero: its solves take the tree sweeps)
  for (int b = 0; b < m->nbody; b++) cs->body_link[b] = -1;
  for (int i = 0; i < n; i++)
    if (cs->chain.body[i] >= 0) cs->body_link[cs->chain.body[i]] = i;
  return cs;
}

static int grow(cfd_csolver* cs, int k) {
  if (k <= cs->cap) return 0;
  size_t kk = (size_t)k;
  free(cs->kind); free(cs->link); free(cs->zone); free(cs->prev); free(cs->w); free(cs->rows);
  free(cs->breaks); free(cs->zone_ls);
  cs->kind = malloc(sizeof(int) * kk);
  cs->link = malloc(sizeof(int) * kk);
  cs->zone = malloc(sizeof(int) * kk);
  cs->prev = malloc(sizeof(int) * kk);
  cs->w = malloc(sizeof(double) * 6 * kk);
  cs->rows = malloc(sizeof(double) * 6 * kk);
  cs->breaks = malloc(sizeof(breakpoint) * 2 * kk);
  cs->zone_ls = malloc(sizeof(int) * kk);
  cs->cap = cs->kind && cs->link && cs->zone && cs->prev && cs->w && cs->rows && cs->breaks &&
                    cs->zone_ls ? k : 0;
  return cs->cap ? 0 : 1;
}

static int grow_coupled(cfd_csolver* cs, int kc) {
  if (kc <= cs->ccap) return 0;
  size_t n = (size_t)cs->n, kk = (size_t)kc;
  free(cs->cidx); free(cs->cact); free(cs->J); free(cs->G); free(cs->Y); free(cs->S); free(cs->cz);
  cs->cidx = malloc(sizeof(int) * kk);
  cs->cact = malloc(sizeof(int) * kk);
  cs->J = malloc(sizeof(double) * kk * n);
  cs->G = malloc(sizeof(double) * kk * n);
  cs->Y = malloc(sizeof(double) * kk * n);
  cs->S = malloc(sizeof(double) * kk * kk);
  cs->cz = malloc(sizeof(double) * 2 * kk);
  cs->ccap = cs->cidx && cs->cact && cs->J && cs->G && cs->Y && cs->S && cs->cz ? kc : 0;
  return cs->ccap ? 0 : 1;
}

// --- the rows' cost ------------------------------------------------------------------------------

// A row's zone at x = J_i a - aref_i, its force -s'(x) and its cost s(x) (constraint.h's s_i)
enum { Z_FREE = mjCNSTRSTATE_SATISFIED, Z_QUAD = mjCNSTRSTATE_QUADRATIC,
       Z_NEG = mjCNSTRSTATE_LINEARNEG, Z_POS = mjCNSTRSTATE_LINEARPOS, Z_CONE = mjCNSTRSTATE_CONE };

static int is_friction(int type) {
  return type == mjCNSTR_FRICTION_DOF || type == mjCNSTR_FRICTION_TENDON;
}

static int row_zone(int type, double x, double R, double fl) {
  if (type == mjCNSTR_EQUALITY) return Z_QUAD;
  if (is_friction(type)) return x <= -R * fl ? Z_NEG : x >= R * fl ? Z_POS : Z_QUAD;
  return x < 0 ? Z_QUAD : Z_FREE;  // limits, frictionless and pyramidal contacts
}

static double row_force(int zone, double x, double D, double fl) {
  return zone == Z_QUAD ? -D * x : zone == Z_NEG ? fl : zone == Z_POS ? -fl : 0;
}

static double row_cost(int zone, double x, double D, double R, double fl) {
  return zone == Z_QUAD ? 0.5 * D * x * x
         : zone == Z_FREE ? 0 : fl * fabs(x) - 0.5 * R * fl * fl;
}

static double dot(const double* a, const double* b, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

// An elliptic contact's rows i .. i + dim - 1 at x (those rows' entries): their zone (one for
// all), forces f and cost, and in the cone zone the Hessian Hc (dim x dim, may be NULL), as
// MuJoCo's mj_constraintUpdate defines them. In the cone's coordinates U = diag(mu, friction) x,
// N = U_0, T = |U_1..|: zero above the cone (N >= mu T), quadratic below its dual (mu N + T <= 0),
// and between them 1/2 Dm (N - mu T)^2, Dm = D_0 / (mu^2 (1 + mu^2)).
static int cone_eval(const mjData* d, int i, const double* x, double* f, double* cost, double* Hc) {
  const mjContact* con = d->contact + d->efc_id[i];
  double mu = con->mu, U[6], T = 0;
  const double* fr = con->friction;
  int dim = con->dim;
  U[0] = x[0] * mu;
  for (int j = 1; j < dim; j++) U[j] = x[j] * fr[j - 1], T += U[j] * U[j];
  T = sqrt(T);
  double N = U[0];
  *cost = 0;
  if (N >= mu * T || (T <= 0 && N >= 0)) {
    for (int j = 0; j < dim; j++) f[j] = 0;
    return Z_FREE;
  }
  if (mu * N + T <= 0 || (T <= 0 && N < 0)) {
    for (int j = 0; j < dim; j++) {
      f[j] = -d->efc_D[i + j] * x[j];
      *cost += 0.5 * d->efc_D[i + j] * x[j] * x[j];
    }
    return Z_QUAD;
  }
  double Dm = d->efc_D[i] / (mu * mu * (1 + mu * mu)), NmT = N - mu * T;
  *cost = 0.5 * Dm * NmT * NmT;
  f[0] = -Dm * NmT * mu;
  for (int j = 1; j < dim; j++) f[j] = -f[0] / T * U[j] * fr[j - 1];
  if (Hc) {  // MuJoCo's cone Hessian, in x
    Hc[0] = 1;
    for (int j = 1; j < dim; j++) Hc[j] = -mu / T * U[j];
    for (int a = 1; a < dim; a++)
      for (int b = a; b < dim; b++) Hc[a * dim + b] = mu * N / (T * T * T) * U[b] * U[a];
    for (int j = 1; j < dim; j++) Hc[j * (dim + 1)] += mu * mu - mu * N / T;
    for (int a = 0; a < dim; a++)
      for (int b = a; b < dim; b++)
        Hc[a * dim + b] *= Dm * (a == 0 ? mu : fr[a - 1]) * (b == 0 ? mu : fr[b - 1]);
    for (int a = 0; a < dim; a++)
      for (int b = a + 1; b < dim; b++) Hc[b * dim + a] = Hc[a * dim + b];
  }
  return Z_CONE;
}

// The eigenvalues lam and eigenvectors (columns of V, row-major n x n) of the symmetric A (n <= 6,
// overwritten) by cyclic Jacobi rotations
static void sym_eig(double* A, int n, double* V, double* lam) {
  for (int i = 0; i < n * n; i++) V[i] = i % (n + 1) == 0;
  for (int sweep = 0; sweep < 50; sweep++) {
    double off = 0;
    for (int p = 0; p < n; p++)
      for (int q = p + 1; q < n; q++) off += A[p * n + q] * A[p * n + q];
    if (off < 1e-30) break;
    for (int p = 0; p < n; p++)
      for (int q = p + 1; q < n; q++) {
        if (A[p * n + q] == 0) continue;
        double th = 0.5 * (A[q * n + q] - A[p * n + p]) / A[p * n + q];
        double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1)), c = 1 / sqrt(t * t + 1),
               sn = t * c;
        for (int r = 0; r < n; r++) {  // A <- A G, then G^T A; V <- V G
          double a = A[r * n + p], b = A[r * n + q];
          A[r * n + p] = c * a - sn * b, A[r * n + q] = sn * a + c * b;
        }
        for (int r = 0; r < n; r++) {
          double a = A[p * n + r], b = A[q * n + r];
          A[p * n + r] = c * a - sn * b, A[q * n + r] = sn * a + c * b;
        }
        for (int r = 0; r < n; r++) {
          double a = V[r * n + p], b = V[r * n + q];
          V[r * n + p] = c * a - sn * b, V[r * n + q] = sn * a + c * b;
        }
      }
  }
  for (int i = 0; i < n; i++) lam[i] = A[i * n + i];
}

// The first row of row i's elliptic contact, or -1 for a row of another kind
static int cone_first(const mjData* d, int i) {
  return d->efc_type[i] == mjCNSTR_CONTACT_ELLIPTIC ? d->contact[d->efc_id[i]].efc_address : -1;
}

// Every row's zone, force and the rows' cost at x (k rows; elliptic contacts together)
static double rows_eval(const mjData* d, int k, const double* x, int* zone, double* f) {
  double cost = 0, c;
  for (int i = 0; i < k; i++) {
    if (d->efc_type[i] == mjCNSTR_CONTACT_ELLIPTIC) {
      int dim = d->contact[d->efc_id[i]].dim, z = cone_eval(d, i, x + i, f + i, &c, NULL);
      for (int j = 0; j < dim; j++) zone[i + j] = z;
      cost += c;
      i += dim - 1;
      continue;
    }
    int z = row_zone(d->efc_type[i], x[i], d->efc_R[i], d->efc_frictionloss[i]);
    zone[i] = z;
    f[i] = row_force(z, x[i], d->efc_D[i], d->efc_frictionloss[i]);
    cost += row_cost(z, x[i], d->efc_D[i], d->efc_R[i], d->efc_frictionloss[i]);
  }
  return cost;
}

// --- sweeps over the tree --------------------------------------------------------------------------

// A (n x 6): each link's spatial acceleration (its frame) from the joint accelerations a, no
// velocity terms: A_i = Ad A_parent + S_i a_i. Then J_i a = w_i . A_link for a body row.
static void link_accelerations(const cfd_csolver* cs, const double* a, double* A) {
  const cfd_chain* c = &cs->chain;
  for (int i = 0; i < cs->n; i++) {
    int par = c->parent[i];
    double* Ai = A + 6 * i;
    const double* S = c->screw + 6 * i;
    if (par < 0)
      for (int k = 0; k < 6; k++) Ai[k] = 0;
    else
      cfd_twist_to_child(cs->pose + 12 * i, cs->pose + 12 * i + 9, A + 6 * par, Ai);
    for (int k = 0; k < 6; k++) Ai[k] += S[k] * a[i];
  }
}

// tau += J^T of the links' wrenches F (n x 6, each in its link's frame; consumed): the wrenches
// gathered towards the root, each joint taking its screw's share
static void joint_forces(const cfd_csolver* cs, double* F, double* tau) {
  const cfd_chain* c = &cs->chain;
  for (int i = cs->n - 1; i >= 0; i--) {
    tau[i] += cfd_dot6(c->screw + 6 * i, F + 6 * i);
    int par = c->parent[i];
    if (par < 0) continue;
    double Fp[6];
    cfd_wrench_to_parent(cs->pose + 12 * i, cs->pose + 12 * i + 9, F + 6 * i, Fp);
    for (int k = 0; k < 6; k++) F[6 * par + k] += Fp[k];
  }
}

// --- the rows' kinds -------------------------------------------------------------------------------

// Row i of a contact of one moving body with the world, as MuJoCo builds it
// (mj_instantiateContact): in the contact frame (normal n, tangents t1, t2), the rows of
// J_contact = frame * (J(geom 2's body) - J(geom 1's body)) at the contact point, translation
// then rotation; frictionless: the normal; pyramidal, pair k = 1 .. dim-1: normal +- mu_k row k;
// elliptic: the frame's rows themselves.
// Returns 0 with w the row's wrench in the body's frame, 1 when the row is not of that kind.
static int contact_row_wrench(const cfd_csolver* cs, const mjModel* m, const mjData* d, int i,
                              int* link, double w[6], int* kind) {
  int type = d->efc_type[i];
  if (type != mjCNSTR_CONTACT_FRICTIONLESS && type != mjCNSTR_CONTACT_PYRAMIDAL &&
      type != mjCNSTR_CONTACT_ELLIPTIC)
    return 1;
  const mjContact* con = d->contact + d->efc_id[i];
  if (con->geom[0] < 0 || con->geom[1] < 0) return 1;  // a flex
  int b0 = m->body_weldid[m->geom_bodyid[con->geom[0]]];
  int b1 = m->body_weldid[m->geom_bodyid[con->geom[1]]];
  if (b0 >= cs->nbody || b1 >= cs->nbody) return 1;
  int l0 = cs->body_link[b0], l1 = cs->body_link[b1];
  if ((l0 >= 0) == (l1 >= 0)) return 1;  // two moving bodies (or none)
  int b = l1 >= 0 ? b1 : b0;
  double sign = l1 >= 0 ? 1 : -1;
  const double* fr = con->frame;
  double u[3] = {fr[0], fr[1], fr[2]}, rot[3] = {0, 0, 0};
  int r = i - con->efc_address;
  if (r < 0 || r >= 10 || con->dim < 1 || con->dim > 6) return 1;
  *kind = (type == mjCNSTR_CONTACT_ELLIPTIC) + 2 * ((l1 >= 0) + 2 * (con->dim + 7 * r));
  if (type == mjCNSTR_CONTACT_ELLIPTIC) {  // row r of the contact frame: translation, rotation
    if (r >= con->dim) return 1;
    const double* e = fr + 3 * (r < 3 ? r : r - 3);
    for (int a = 0; a < 3; a++) {
      u[a] = r < 3 ? e[a] : 0;
      rot[a] = r < 3 ? 0 : e[a];
    }
  } else if (type == mjCNSTR_CONTACT_PYRAMIDAL) {
    int k = r / 2 + 1;
    if (k >= con->dim) return 1;
    double mu = con->friction[k - 1] * (r % 2 ? -1 : 1);
    const double* e = fr + 3 * (k <= 2 ? k : k - 3);
    for (int a = 0; a < 3; a++) {
      if (k <= 2) u[a] += mu * e[a];
      else rot[a] = mu * e[a];
    }
  }
  // u . (v_o + w x (p - x)) + rot . w, with v_o and w the body's (world components): the wrench
  // (torque (p - x) x u + rot, force u) in the body's frame
  const double* R = d->xmat + 9 * b;
  double arm[3], t[3];
  for (int a = 0; a < 3; a++) arm[a] = con->pos[a] - d->xpos[3 * b + a];
  cfd_cross(arm, u, t);
  for (int a = 0; a < 3; a++) t[a] += rot[a];
  for (int a = 0; a < 3; a++) {
    w[a] = sign * (R[a] * t[0] + R[3 + a] * t[1] + R[6 + a] * t[2]);
    w[3 + a] = sign * (R[a] * u[0] + R[3 + a] * u[1] + R[6 + a] * u[2]);
  }
  *link = cs->body_link[b];
  return 0;
}

// Row i of efc_J times v, from MuJoCo's sparse or dense storage
static double efc_row_dot(const mjModel* m, const mjData* d, int i, const double* v) {
  double s = 0;
  if (mj_isSparse(m)) {
    int adr = d->efc_J_rowadr[i];
    for (int t = 0; t < d->efc_J_rownnz[i]; t++) s += d->efc_J[adr + t] * v[d->efc_J_colind[adr + t]];
  } else {
    const double* Ji = d->efc_J + (size_t)i * m->nv;
    for (int j = 0; j < m->nv; j++) s += Ji[j] * v[j];
  }
  return s;
}

// Sorts the rows into body, dof and coupled rows (constraint.h) and expands the coupled rows' J
// dense. A dof row has one nonzero; a body row's wrench follows contact_row_wrench's rule, which
// is checked against efc_J the first time each kind of row appears (J probe both ways, probe a
// fixed pseudo-random vector, to a tolerance far above rounding and far below a wrong rule): a
// kind whose rule fails makes coupled rows from then on. Returns the number of coupled rows, or
// -1 out of memory.
static int classify(cfd_csolver* cs, const mjModel* m, const mjData* d, int k, double* probe,
                    cfd_csolve_stats* st) {
  int n = cs->n, sparse = mj_isSparse(m), kc = 0, probed = 0;
  for (int i = 0; i < k; i++) {
    int t = d->efc_type[i], kind;
    cs->kind[i] = ROW_COUPLED;
    if (t == mjCNSTR_CONTACT_FRICTIONLESS || t == mjCNSTR_CONTACT_PYRAMIDAL ||
        t == mjCNSTR_CONTACT_ELLIPTIC) {
      if (contact_row_wrench(cs, m, d, i, cs->link + i, cs->w + 6 * i, &kind) ||
          cs->checked[kind] == 2)
        continue;
      if (!cs->checked[kind]) {
        if (!probed) {
          unsigned long long r = 0x9E3779B97F4A7C15ull;
          for (int j = 0; j < n; j++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            probe[j] = (double)(r >> 11) / 9007199254740992.0 * 2 - 1;
          }
          link_accelerations(cs, probe, cs->link6);
          probed = 1;
        }
        const double* w = cs->w + 6 * i;
        const double* A = cs->link6 + 6 * cs->link[i];
        double ref = efc_row_dot(m, d, i, probe), got = cfd_dot6(w, A);
        double size = sqrt(cfd_dot6(w, w) * cfd_dot6(A, A)) + fabs(ref);
        cs->checked[kind] = fabs(got - ref) <= 1e-9 * size ? 1 : 2;
        if (cs->checked[kind] == 2) continue;
      }
      cs->kind[i] = ROW_BODY;
      continue;
    }
    int nnz = 0, j = -1;
    double cj = 0;
    if (sparse) {
      int adr = d->efc_J_rowadr[i];
      for (int e = 0; e < d->efc_J_rownnz[i] && nnz < 2; e++)
        if (d->efc_J[adr + e] != 0) nnz++, j = d->efc_J_colind[adr + e], cj = d->efc_J[adr + e];
    } else {
      const double* Ji = d->efc_J + (size_t)i * n;
      for (int e = 0; e < n && nnz < 2; e++)
        if (Ji[e] != 0) nnz++, j = e, cj = Ji[e];
    }
    if (nnz == 1) {
      cs->kind[i] = ROW_DOF;
      cs->link[i] = j;
      cs->w[6 * i] = cj;
    }
  }
  // an elliptic contact's rows go together: body rows of one link, or all coupled
  for (int i = 0; i < k; i++) {
    if (cone_first(d, i) != i) continue;
    int dim = d->contact[d->efc_id[i]].dim, body = 1;
    for (int j = 0; j < dim; j++)
      body &= cs->kind[i + j] == ROW_BODY && cs->link[i + j] == cs->link[i];
    for (int j = 0; j < dim && !body; j++) cs->kind[i + j] = ROW_COUPLED;
  }
  st->rows_body = st->rows_dof = 0;
  for (int i = 0; i < k; i++) {
    st->rows_body += cs->kind[i] == ROW_BODY;
    st->rows_dof += cs->kind[i] == ROW_DOF;
    kc += cs->kind[i] == ROW_COUPLED;
  }
  st->rows_coupled = kc;
  if (grow_coupled(cs, kc)) return -1;
  kc = 0;
  for (int i = 0; i < k; i++) {
    if (cs->kind[i] != ROW_COUPLED) continue;
    double* Ji = cs->J + (size_t)kc * n;
    if (sparse) {
      for (int j = 0; j < n; j++) Ji[j] = 0;
      int adr = d->efc_J_rowadr[i];
      for (int t = 0; t < d->efc_J_rownnz[i]; t++) Ji[d->efc_J_colind[adr + t]] = d->efc_J[adr + t];
    } else {
      memcpy(Ji, d->efc_J + (size_t)i * n, sizeof(double) * n);
    }
    cs->cidx[kc++] = i;
  }
  return kc;
}

// Jv (k) = J v for every row; A (n x 6) scratch
static void rows_times(const cfd_csolver* cs, int k, int kc, const double* v, double* Jv) {
  link_accelerations(cs, v, cs->link6);
  for (int i = 0; i < k; i++) {
    if (cs->kind[i] == ROW_BODY) Jv[i] = cfd_dot6(cs->w + 6 * i, cs->link6 + 6 * cs->link[i]);
    else if (cs->kind[i] == ROW_DOF) Jv[i] = cs->w[6 * i] * v[cs->link[i]];
  }
  for (int c = 0; c < kc; c++) Jv[cs->cidx[c]] = dot(cs->J + (size_t)c * cs->n, v, cs->n);
}

// Jv = J v and Mv = M v (armature included) for one vector: the links' accelerations from one
// sweep out serve both; M v gathers the links' inertial wrenches J_i A_i back in (inverse dynamics
// at rest, without gravity, on the poses of this solve).
static void rows_and_mass_times(cfd_csolver* cs, int k, int kc, const double* v, double* Jv,
                                double* Mv) {
  int n = cs->n;
  rows_times(cs, k, kc, v, Jv);
  for (int i = 0; i < n; i++) {
    cfd_mat6_vec(cs->chain.inertia + 36 * (size_t)i, cs->link6 + 6 * i, cs->force6 + 6 * i);
    Mv[i] = cs->chain.armature[i] * v[i];
  }
  joint_forces(cs, cs->force6, Mv);
}

// out = J^T f
static void rows_transpose_times(cfd_csolver* cs, int k, int kc, const double* f, double* out) {
  int n = cs->n;
  for (int j = 0; j < n; j++) out[j] = 0;
  for (int j = 0; j < 6 * n; j++) cs->link6[j] = 0;
  for (int i = 0; i < k; i++) {
    if (f[i] == 0) continue;
    if (cs->kind[i] == ROW_BODY)
      for (int a = 0; a < 6; a++) cs->link6[6 * cs->link[i] + a] += cs->w[6 * i + a] * f[i];
    else if (cs->kind[i] == ROW_DOF)
      out[cs->link[i]] += cs->w[6 * i] * f[i];
  }
  joint_forces(cs, cs->link6, out);
  for (int c = 0; c < kc; c++) {
    double fc = f[cs->cidx[c]];
    if (fc != 0)
      for (int j = 0; j < n; j++) out[j] += cs->J[(size_t)c * n + j] * fc;
  }
}

// --- the line search ---------------------------------------------------------------------------

// Row i's share of phi'(alpha) along the direction, -Jd_i f_i(x_i + alpha Jd_i), in zone z: c0 +
// alpha c1 (constraint.h's s_i, differentiated)
static void row_slope(const mjData* d, int i, int z, double x, double Jd, double* c0, double* c1) {
  double D = d->efc_D[i], fl = d->efc_frictionloss[i];
  *c0 = z == Z_QUAD ? D * Jd * x : z == Z_NEG ? -Jd * fl : z == Z_POS ? Jd * fl : 0;
  *c1 = z == Z_QUAD ? D * Jd * Jd : 0;
}

static int cmp_breakpoint(const void* a, const void* b) {
  double x = ((const breakpoint*)a)->alpha, y = ((const breakpoint*)b)->alpha;
  return x < y ? -1 : x > y;
}

// The exact minimiser of phi along the direction. phi' = dMe + alpha dMd - sum_i Jd_i f_i is
// continuous, nondecreasing and piecewise linear, its pieces ending where a row changes zone (its
// breakpoints); walked in order, each crossing changes one row's share of the line G + alpha H, so
// the walk costs O(k log k) for the sort and O(1) a piece. *pieces: how many were walked.
static double line_search(cfd_csolver* cs, const mjData* d, int k, const double* x,
                          const double* Jd, double dMe, double dMd, int* pieces) {
  breakpoint* bp = cs->breaks;
  int nb = 0;
  for (int i = 0; i < k; i++) {
    if (Jd[i] == 0) continue;
    int t = d->efc_type[i];
    double Rf = d->efc_R[i] * d->efc_frictionloss[i];
    if (t == mjCNSTR_EQUALITY) continue;
    if (is_friction(t)) {
      double a1 = (-Rf - x[i]) / Jd[i], a2 = (Rf - x[i]) / Jd[i];
      if (a1 > 0) bp[nb++] = (breakpoint){a1, i};
      if (a2 > 0) bp[nb++] = (breakpoint){a2, i};
    } else {
      double a0 = -x[i] / Jd[i];
      if (a0 > 0) bp[nb++] = (breakpoint){a0, i};
    }
  }
  qsort(bp, (size_t)nb, sizeof(breakpoint), cmp_breakpoint);
  // the line on the first piece, from the zones inside it
  double G = dMe, H = dMd, lo = 0, mid = nb ? 0.5 * bp[0].alpha : 1, c0, c1;
  for (int i = 0; i < k; i++) {
    if (Jd[i] == 0) continue;
    int z = row_zone(d->efc_type[i], x[i] + mid * Jd[i], d->efc_R[i], d->efc_frictionloss[i]);
    cs->zone_ls[i] = z;
    row_slope(d, i, z, x[i], Jd[i], &c0, &c1);
    G += c0;
    H += c1;
  }
  *pieces = 1;
  for (int b = 0; b <= nb; b++) {
    double hi = b < nb ? bp[b].alpha : INFINITY;
    if (!(H >= dMd)) H = dMd;  // (the updates' rounding: H is at least dMd > 0)
    double root = -G / H;
    if (root <= hi || b == nb) return root > lo ? root : lo;
    // cross: row i takes its zone inside the next piece (past any breakpoints tied with this one)
    int i = bp[b].row, next = b + 1;
    while (next < nb && bp[next].alpha <= hi) next++;
    mid = next < nb ? 0.5 * (hi + bp[next].alpha) : hi + 1 + hi;
    int z = row_zone(d->efc_type[i], x[i] + mid * Jd[i], d->efc_R[i], d->efc_frictionloss[i]);
    row_slope(d, i, cs->zone_ls[i], x[i], Jd[i], &c0, &c1);
    G -= c0;
    H -= c1;
    row_slope(d, i, z, x[i], Jd[i], &c0, &c1);
    G += c0;
    H += c1;
    cs->zone_ls[i] = z;
    lo = hi;
    ++*pieces;
  }
  return lo;
}

// phi'(alpha) and phi''(alpha) along the direction with elliptic contacts among the rows: each row
// or contact in its zone at alpha (the cone zone's slope by its Hessian)
static void line_eval(const mjData* d, int k, const double* x, const double* Jd, double dMe,
                      double dMd, double alpha, double* g, double* h) {
  double gs = dMe + alpha * dMd, hs = dMd;
  for (int i = 0; i < k; i++) {
    if (d->efc_type[i] == mjCNSTR_CONTACT_ELLIPTIC) {
      int dim = d->contact[d->efc_id[i]].dim, any = 0;
      double xs[6], fs[6], Hc[36], c;
      for (int j = 0; j < dim; j++) xs[j] = x[i + j] + alpha * Jd[i + j], any |= Jd[i + j] != 0;
      if (any) {
        int z = cone_eval(d, i, xs, fs, &c, Hc);
        for (int a = 0; a < dim; a++) {
          gs -= Jd[i + a] * fs[a];
          if (z == Z_QUAD) hs += d->efc_D[i + a] * Jd[i + a] * Jd[i + a];
          if (z == Z_CONE)
            for (int b = 0; b < dim; b++) hs += Jd[i + a] * Hc[a * dim + b] * Jd[i + b];
        }
      }
      i += dim - 1;
      continue;
    }
    if (Jd[i] == 0) continue;
    double xi = x[i] + alpha * Jd[i];
    int z = row_zone(d->efc_type[i], xi, d->efc_R[i], d->efc_frictionloss[i]);
    gs -= Jd[i] * row_force(z, xi, d->efc_D[i], d->efc_frictionloss[i]);
    if (z == Z_QUAD) hs += d->efc_D[i] * Jd[i] * Jd[i];
  }
  *g = gs;
  *h = hs;
}

// The minimiser of phi along the direction where elliptic contacts make phi' nonlinear (still
// continuous and nondecreasing: the cost is convex and C1): the root of phi' bracketed by
// doubling, then Newton's steps on it, bisection where a step leaves the bracket, to rounding.
static double line_search_cones(cfd_csolver* cs, const mjData* d, int k, const double* x,
                                const double* Jd, double dMe, double dMd, int* pieces) {
  (void)cs;
  double lo = 0, hi = 1, g, h;
  *pieces = 0;
  for (int t = 0; t < 60; t++, hi *= 2) {
    line_eval(d, k, x, Jd, dMe, dMd, hi, &g, &h);
    ++*pieces;
    if (g >= 0) break;
    lo = hi;
  }
  if (g <= 0) return hi;  // (the top is the root: near convergence, often alpha = 1)
  double a = hi - g / h;  // Newton from the bracket's top
  for (int t = 0; t < 100 && hi - lo > 1e-15 * hi; t++) {
    if (!(a > lo && a < hi)) a = 0.5 * (lo + hi);
    line_eval(d, k, x, Jd, dMe, dMd, a, &g, &h);
    ++*pieces;
    if (g == 0) return a;
    if (g < 0) lo = a;
    else hi = a;
    a = a - g / h;
  }
  return 0.5 * (lo + hi);
}

// --- the solve ---------------------------------------------------------------------------------------

// out = H0^-1 g (constraint.h): the ABA at rest without gravity, its inertias augmented by the body
// rows where any is active (nab), the dof rows' terms on the joint diagonal xdiag. Nonzero when a
// pivot is not positive.
static int h0_solve(cfd_csolver* cs, int nab, const double* q, const double* zero, const double* g,
                    const double* xdiag, double* out) {
  if (nab) return cfd_aba_tree(&cs->aug, q, zero, g, xdiag, out, 1, cs->tree_work, 1) != CFD_OK;
  return cfd_fd_fast_prepared(&cs->chain, q, zero, g, xdiag, out, cs->fast_work) != CFD_OK;
}

int cfd_csolver_solve(cfd_csolver* cs, const mjModel* m, const mjData* d, const double* qacc_smooth,
                      const cfd_csolve_opt* opt, const cfd_csolve_out* out, cfd_csolve_stats* stats,
                      char* err, int err_size) {
  int n = cs->n, k = (int)d->nefc;
  cfd_csolve_stats st = {0};
  double* qacc = out->qacc;
  if (err_size > 0) err[0] = 0;
  if (n != m->nv) {
    snprintf(err, err_size, "the constraint solver was made for %d dofs, the model has %d", n,
             (int)m->nv);
    return 1;
  }
  if (m->nbody != cs->nbody) {
    snprintf(err, err_size, "the constraint solver was made for %d bodies, the model has %d",
             cs->nbody, (int)m->nbody);
    return 1;
  }
  if (grow(cs, k)) { snprintf(err, err_size, "out of memory for %d constraint rows", k); return 1; }
  double *q = cs->vec, *zero = q + n, *e = zero + n, *Me = e + n, *u = Me + n, *dir = u + n,
         *Md = dir + n, *grad = Md + n, *xdiag = grad + n, *probe = xdiag + n;
  double *x = cs->rows, *f = x + k, *Jd = f + k;
  cfd_chain_q_from_qpos(&cs->chain, d->qpos, q);
  for (int j = 0; j < n; j++) zero[j] = 0;
  for (int i = 0; i < n; i++) cfd_link_pose(&cs->chain, i, q, 1, cs->pose + 12 * i, cs->pose + 12 * i + 9);
  int kc = classify(cs, m, d, k, probe, &st);
  if (kc < 0) { snprintf(err, err_size, "out of memory for %d constraint rows", k); return 1; }
  // x at qacc_smooth: MuJoCo's efc_b (to rounding), in O(n + k) for the body and dof rows
  rows_times(cs, k, kc, qacc_smooth, x);
  for (int i = 0; i < k; i++) x[i] -= d->efc_aref[i];
  if (out->efc_b && k) memcpy(out->efc_b, x, sizeof(double) * k);

  double scale = 1 / (m->stat.meaninertia * (n > 1 ? n : 1));
  memcpy(qacc, qacc_smooth, sizeof(double) * n);
  for (int j = 0; j < n; j++) e[j] = Me[j] = 0;
  for (int i = 0; i < k; i++) cs->prev[i] = -1;
  double cost = 0, eMe = 0, last_gradient = INFINITY;
  // the warm start, as MuJoCo's: from opt->warmstart where the cost is lower there than at
  // qacc_smooth (the last step's acceleration: often one Newton step from the answer)
  if (opt->warmstart) {
    double cost0 = rows_eval(d, k, x, cs->zone_ls, f), costw;
    for (int j = 0; j < n; j++) dir[j] = opt->warmstart[j] - qacc_smooth[j];
    rows_and_mass_times(cs, k, kc, dir, Jd, Md);
    for (int i = 0; i < k; i++) Jd[i] += x[i];  // (x at the warm start, for a moment)
    costw = 0.5 * dot(dir, Md, n) + rows_eval(d, k, Jd, cs->zone_ls, f);
    for (int i = 0; i < k; i++) Jd[i] -= x[i];
    if (costw < cost0) {
      memcpy(qacc, opt->warmstart, sizeof(double) * n);
      memcpy(e, dir, sizeof(double) * n);
      memcpy(Me, Md, sizeof(double) * n);
      for (int i = 0; i < k; i++) x[i] += Jd[i];
      eMe = dot(e, Me, n);
    }
  }
  int status = 1, settled = 0, cones = 0;
  for (int i = 0; i < k; i++) cones |= d->efc_type[i] == mjCNSTR_CONTACT_ELLIPTIC;
  for (st.iterations = 0;; st.iterations++) {
    // the rows' zones and forces at qacc; the gradient M e - J^T f; the cost
    int same = 1, na = 0, nchange = 0;
    double new_cost = 0.5 * eMe + rows_eval(d, k, x, cs->zone, f);
    for (int i = 0; i < k; i++) {
      int zi = cs->zone[i];
      nchange += zi != cs->prev[i];
      same &= zi == cs->prev[i] && zi != Z_CONE;  // (the cone zone's cost is not quadratic)
      cs->prev[i] = zi;
      na += zi == Z_QUAD || zi == Z_CONE;
    }
    rows_transpose_times(cs, k, kc, f, grad);
    for (int j = 0; j < n; j++) grad[j] = Me[j] - grad[j];
    st.gradient = sqrt(dot(grad, grad, n)) * scale;
    st.active = na;
    if (st.iterations > 0 && out->trace && st.iterations <= out->trace_size) {
      mjSolverStat* tr = out->trace + st.iterations - 1;
      tr->improvement = scale * (cost - new_cost);
      tr->gradient = st.gradient;
      tr->nactive = na;
      tr->nchange = nchange;
    }
    cost = new_cost;
    // converged: a small gradient, or a step that kept every zone. A row's x moves linearly along
    // the step, so zones equal at both ends are equal all along it: the step stayed on one piece
    // of the cost, a quadratic, whose minimiser along the Newton direction is its minimiser. In
    // exact arithmetic; Woodbury's subtraction leaves rounding of about eps times the ratio of
    // M^-1 g to H^-1 g (1e-10 on a stiff weld), so one more step on the same piece refines it,
    // unless it no longer lowers the gradient.
    // With elliptic cones (no quadratic pieces to settle on) Newton's steps shrink the gradient
    // quadratically down to rounding: a step that no longer halves a gradient already below 1e-9
    // has reached it.
    settled = same ? settled + 1 : 0;
    if (st.gradient < opt->tol || settled >= 2 || (settled && !(st.gradient < last_gradient)) ||
        (cones && st.gradient < 1e-9 && !(st.gradient < 0.5 * last_gradient))) {
      status = 0;
      break;
    }
    last_gradient = st.gradient;
    if (st.iterations >= opt->max_iter) break;

    // H0: the body and dof rows in their quadratic zone added to the inertias and the diagonal
    // (no body row: the inertias are M's, and cpu.fast's prepared sweeps apply H0^-1)
    int nab = 0;
    for (int j = 0; j < n; j++) xdiag[j] = 0;
    for (int i = 0; i < k; i++) {
      if (cs->zone[i] != Z_QUAD) continue;
      const double* w = cs->w + 6 * i;
      double D = d->efc_D[i];
      if (cs->kind[i] == ROW_DOF) {
        xdiag[cs->link[i]] += D * w[0] * w[0];
      } else if (cs->kind[i] == ROW_BODY) {
        if (!nab++) memcpy(cs->aug.inertia, cs->chain.inertia, sizeof(double) * 36 * (size_t)n);
        double* I = cs->aug.inertia + 36 * (size_t)cs->link[i];
        for (int r = 0; r < 6; r++)
          for (int c = 0; c < 6; c++) I[6 * r + c] += D * w[r] * w[c];
      }
    }
    // elliptic contacts in the cone zone: W Hc W^T on their body (W: the rows' wrenches), where
    // every row of the contact is a body row of one link; otherwise their block is left out of
    // the Hessian (the direction stays a descent one, the line search exact: slower, not wrong)
    for (int i = 0; i < k; i++) {
      if (cs->zone[i] != Z_CONE || cone_first(d, i) != i) continue;
      int dim = d->contact[d->efc_id[i]].dim, body = 1;
      for (int j = 0; j < dim; j++)
        body &= cs->kind[i + j] == ROW_BODY && cs->link[i + j] == cs->link[i];
      if (!body) continue;
      double Hc[36], c;
      cone_eval(d, i, x + i, f + i, &c, Hc);
      if (!nab++) memcpy(cs->aug.inertia, cs->chain.inertia, sizeof(double) * 36 * (size_t)n);
      double* I = cs->aug.inertia + 36 * (size_t)cs->link[i];
      for (int a = 0; a < dim; a++)
        for (int b = 0; b < dim; b++) {
          double h = Hc[a * dim + b];
          const double *wa = cs->w + 6 * (i + a), *wb = cs->w + 6 * (i + b);
          for (int r = 0; r < 6; r++)
            for (int cc = 0; cc < 6; cc++) I[6 * r + cc] += h * wa[r] * wb[cc];
        }
    }
    // the coupled rows' share of the Hessian as factor columns G (J_C^T Hblk J_C = G^T G): a
    // quadratic row sqrt(D) J_i, an elliptic contact in the cone zone sqrt(lambda) V^T J_c from
    // its Hessian block's eigenvalues (rank dim - 1: no inverse, hence this form of Woodbury)
    int nca = 0;
    for (int c = 0; c < kc; c++) {
      int i = cs->cidx[c];
      double* g = cs->G + (size_t)nca * n;
      if (cs->zone[i] == Z_QUAD) {
        double sd = sqrt(d->efc_D[i]);
        for (int j = 0; j < n; j++) g[j] = sd * cs->J[(size_t)c * n + j];
        nca++;
      } else if (cs->zone[i] == Z_CONE && cone_first(d, i) == i) {
        int dim = d->contact[d->efc_id[i]].dim;  // (its rows are the next dim coupled ones)
        double Hc[36], V[36], lam[6], fc[6], cc, top = 0;
        cone_eval(d, i, x + i, fc, &cc, Hc);
        sym_eig(Hc, dim, V, lam);
        for (int e = 0; e < dim; e++) top = fmax(top, lam[e]);
        for (int e = 0; e < dim; e++) {
          if (!(lam[e] > 1e-14 * top)) continue;
          g = cs->G + (size_t)nca++ * n;
          double sl = sqrt(lam[e]);
          for (int j = 0; j < n; j++) g[j] = 0;
          for (int a = 0; a < dim; a++)
            for (int j = 0; j < n; j++) g[j] += sl * V[a * dim + e] * cs->J[(size_t)(c + a) * n + j];
        }
      }
    }
    // u = H0^-1 grad; the coupled part by Woodbury: dir = -(u - Y (I + G Y)^-1 G u), Y = H0^-1 G^T
    int bad = h0_solve(cs, nab, q, zero, grad, xdiag, u);
    for (int a = 0; a < nca && !bad; a++)
      bad = h0_solve(cs, nab, q, zero, cs->G + (size_t)a * n, xdiag, cs->Y + (size_t)a * n);
    double *S = cs->S, *r = cs->cz, *z = r + nca;
    for (int a = 0; a < nca && !bad; a++) {
      const double* Ga = cs->G + (size_t)a * n;
      for (int b = 0; b <= a; b++) S[(size_t)a * nca + b] = dot(Ga, cs->Y + (size_t)b * n, n);
      S[(size_t)a * nca + a] += 1;
      r[a] = dot(Ga, u, n);
    }
    if (!bad && nca) bad = cfd_chol_factor(S, nca, nca);
    if (bad) {
      snprintf(err, err_size, "the Hessian of the constrained problem is not positive definite");
      break;
    }
    for (int a = 0; a < nca; a++) z[a] = r[a];
    if (nca) cfd_chol_solve(S, nca, nca, z, 1, 1);
    for (int j = 0; j < n; j++) dir[j] = -u[j];
    for (int a = 0; a < nca; a++)
      for (int j = 0; j < n; j++) dir[j] += cs->Y[(size_t)a * n + j] * z[a];
    // J dir, and M dir (armature added as M has it)
    rows_and_mass_times(cs, k, kc, dir, Jd, Md);
    double dMd = dot(dir, Md, n), dMe = dot(dir, Me, n);
    if (!(dMd > 0)) { status = 0; break; }  // no direction left: at the minimum
    int pieces;
    double alpha = cones ? line_search_cones(cs, d, k, x, Jd, dMe, dMd, &pieces)
                         : line_search(cs, d, k, x, Jd, dMe, dMd, &pieces);
    if (out->trace && st.iterations < out->trace_size) {
      mjSolverStat* tr = out->trace + st.iterations;
      memset(tr, 0, sizeof *tr);
      tr->lineslope = scale * (dMe - dot(Jd, f, k)) / sqrt(dMd);
      tr->neval = pieces;
    }
    for (int j = 0; j < n; j++) {
      qacc[j] += alpha * dir[j];
      e[j] += alpha * dir[j];
      Me[j] += alpha * Md[j];
    }
    for (int i = 0; i < k; i++) x[i] += alpha * Jd[i];
    eMe = dot(e, Me, n);
  }
  if (out->efc_force && k) memcpy(out->efc_force, f, sizeof(double) * k);
  if (out->qfrc_constraint) rows_transpose_times(cs, k, kc, f, out->qfrc_constraint);
  if (out->efc_state && k) memcpy(out->efc_state, cs->zone, sizeof(int) * k);
  st.cost = cost;
  if (stats) *stats = st;
  if (status && !err[0])
    snprintf(err, err_size, "no convergence in %d Newton steps (scaled gradient %.3g)",
             st.iterations, st.gradient);
  return status;
}
