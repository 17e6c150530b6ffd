// A high-precision reference for checks: qacc to (nearly) full double accuracy, whatever the
// conditioning of M, by mixed-precision iterative refinement. The residual
//   r = tau - ID(q, qd, qacc) - D qacc
// is computed in long double (x87 extended: 64-bit mantissa) with a separate, plain Newton-Euler
// (twists and wrenches in link frames, as id_cpu.c); the correction M^-1 r comes from the double
// ABA with qd = 0 and no gravity. Each step multiplies the error by about cond(M) * 1e-16.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chain.h"

typedef long double real;

static void cross(const real a[3], const real b[3], real o[3]) {
  real x = a[1] * b[2] - a[2] * b[1], y = a[2] * b[0] - a[0] * b[2], z = a[0] * b[1] - a[1] * b[0];
  o[0] = x; o[1] = y; o[2] = z;
}

// (R, p) = home * exp(S q), in long double; a ball's first link turns by exp of the twist
// sum_k S_k r_k (joints.h), a BALL_NEXT link sits at its home pose
static void pose(const cfd_chain* c, int i, const double* q, real R[9], real p[3]) {
  real S[6], t = q[i], Re[9], pe[3];
  for (int k = 0; k < 6; k++) S[k] = c->screw[6 * i + k];
  if (c->kind[i] == CFD_LINK_BALL) {
    for (int k = 0; k < 6; k++)
      S[k] = S[k] * (real)q[i] + c->screw[6 * i + 6 + k] * (real)q[i + 1] +
             c->screw[6 * i + 12 + k] * (real)q[i + 2];
    t = sqrtl(S[0] * S[0] + S[1] * S[1] + S[2] * S[2]);
    for (int k = 0; k < 6; k++) S[k] = t > 0 ? S[k] / t : 0;
  } else if (c->kind[i] == CFD_LINK_BALL_NEXT) {
    t = 0;
  }
  if (S[0] == 0 && S[1] == 0 && S[2] == 0) {
    for (int k = 0; k < 9; k++) Re[k] = (k % 4 == 0);
    for (int k = 0; k < 3; k++) pe[k] = S[3 + k] * t;
  } else {
    real w[3] = {S[0], S[1], S[2]}, v[3] = {S[3], S[4], S[5]}, s = sinl(t), co = cosl(t), k1 = 1 - co;
    real x = w[0], y = w[1], z = w[2];
    real Rr[9] = {co + k1 * x * x,     k1 * x * y - s * z, k1 * x * z + s * y,
                  k1 * x * y + s * z,  co + k1 * y * y,    k1 * y * z - s * x,
                  k1 * x * z - s * y,  k1 * y * z + s * x, co + k1 * z * z};
    memcpy(Re, Rr, sizeof(Rr));
    real wv[3], wwv[3];
    cross(w, v, wv);
    cross(w, wv, wwv);
    for (int k = 0; k < 3; k++) pe[k] = t * v[k] + k1 * wv[k] + (t - s) * wwv[k];
  }
  const double* H = c->home_R + 9 * i;
  const double* h = c->home_p + 3 * i;
  for (int r = 0; r < 3; r++) {
    p[r] = h[r];
    for (int k = 0; k < 3; k++) {
      R[3 * r + k] = H[3 * r] * Re[k] + H[3 * r + 1] * Re[3 + k] + H[3 * r + 2] * Re[6 + k];
      p[r] += H[3 * r + k] * pe[k];
    }
  }
}

// X' = Ad_{T^-1} X for a twist, T = (R, p): w' = R^T w, v' = R^T (v + w x p)
static void to_child(const real R[9], const real p[3], const real X[6], real Y[6]) {
  real t[3];
  cross(X, p, t);
  for (int k = 0; k < 3; k++) t[k] += X[3 + k];
  for (int k = 0; k < 3; k++) {
    Y[k] = R[k] * X[0] + R[3 + k] * X[1] + R[6 + k] * X[2];
    Y[3 + k] = R[k] * t[0] + R[3 + k] * t[1] + R[6 + k] * t[2];
  }
}

// the doubles of real scratch id_ld takes per link
enum { ID_LD_PER_LINK = 6 + 9 + 3 + 12 };

// tau = ID(q, qd, qdd) in long double (no armature, as mj_rne), on the tree (id_cpu.c's sweeps)
static void id_ld(const cfd_chain* c, const double* q, const double* qd, const real* qdd, real* tau,
                  real* scratch) {
  int n = c->n;
  real* F = scratch;
  real* Rs = F + 6 * n;
  real* ps = Rs + 9 * n;
  real* Vs = ps + 3 * n;
  real* As = Vs + 6 * n;
  const real zero[6] = {0}, base[6] = {0, 0, 0, -c->gravity[0], -c->gravity[1], -c->gravity[2]};
  for (int i = 0; i < n; i++) {
    real* R = Rs + 9 * i;
    real* p = ps + 3 * i;
    real* V = Vs + 6 * i;
    real* A = As + 6 * i;
    int par = c->parent[i];
    pose(c, i, q, R, p);
    to_child(R, p, par < 0 ? zero : Vs + 6 * par, V);
    to_child(R, p, par < 0 ? base : As + 6 * par, A);
    const double* S = c->screw + 6 * i;
    real Sq[6], Vb[6];
    for (int k = 0; k < 6; k++) {
      Sq[k] = S[k] * (real)qd[i];
      V[k] += Sq[k];
      Vb[k] = V[k];
    }
    if (c->kind[i] == CFD_LINK_BALL_NEXT) {  // against the velocity before the ball (joints.h)
      int g = i;
      while (c->kind[g] == CFD_LINK_BALL_NEXT) g--;
      for (int k = 0; k < 6; k++) Vb[k] = Vs[6 * g + k] - c->screw[6 * g + k] * (real)qd[g];
    }
    real a[3], b[3], d[3];  // ad_Vb (S qd)
    cross(Vb, Sq, a);
    cross(Vb, Sq + 3, b);
    cross(Vb + 3, Sq, d);
    for (int k = 0; k < 3; k++) {
      A[k] += a[k] + S[k] * qdd[i];
      A[3 + k] += b[k] + d[k] + S[3 + k] * qdd[i];
    }
    const double* J = c->inertia + 36 * i;
    real JV[6], JA[6];
    for (int r = 0; r < 6; r++) {
      JV[r] = JA[r] = 0;
      for (int k = 0; k < 6; k++) {
        JV[r] += J[6 * r + k] * V[k];
        JA[r] += J[6 * r + k] * A[k];
      }
    }
    real g1[3], g2[3], g3[3];  // -ad*_V JV = [w x m + v x f; w x f]
    cross(V, JV, g1);
    cross(V + 3, JV + 3, g2);
    cross(V, JV + 3, g3);
    for (int k = 0; k < 3; k++) {
      F[6 * i + k] = JA[k] + g1[k] + g2[k];
      F[6 * i + 3 + k] = JA[3 + k] + g3[k];
    }
  }
  for (int i = n - 1; i >= 0; i--) {
    const double* S = c->screw + 6 * i;
    real s = 0;
    for (int k = 0; k < 6; k++) s += S[k] * F[6 * i + k];
    tau[i] = s;
    int par = c->parent[i];
    if (par < 0) continue;
    // this wrench to the parent's frame: f = R f', m = R m' + p x (R f')
    const real* R = Rs + 9 * i;
    const real* p = ps + 3 * i;
    const real* Fc = F + 6 * i;
    real m[3], f[3], t[3];
    for (int r = 0; r < 3; r++) {
      m[r] = R[3 * r] * Fc[0] + R[3 * r + 1] * Fc[1] + R[3 * r + 2] * Fc[2];
      f[r] = R[3 * r] * Fc[3] + R[3 * r + 1] * Fc[4] + R[3 * r + 2] * Fc[5];
    }
    cross(p, f, t);
    for (int k = 0; k < 3; k++) {
      F[6 * par + k] += m[k] + t[k];
      F[6 * par + 3 + k] += f[k];
    }
  }
}

int cfd_id_ld(const cfd_chain* c, const double* q, const double* qd, const double* qdd,
              double* tau) {
  int n = c->n;
  real* x = calloc((size_t)n * (2 + ID_LD_PER_LINK), sizeof(real));
  if (!x) return CFD_ERR_ALLOC;
  for (int i = 0; i < n; i++) x[i] = qdd ? qdd[i] : 0;
  id_ld(c, q, qd, x, x + n, x + 2 * n);
  for (int i = 0; i < n; i++) tau[i] = (double)x[n + i];
  free(x);
  return CFD_OK;
}

int cfd_fd_reference(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                     const double* extra_diag, double* qacc) {
  int n = c->n;
  real* x = malloc(sizeof(real) * n * (2 + ID_LD_PER_LINK));
  double* work = malloc(sizeof(double) * (cfd_fast_work_size(n) + 3 * (size_t)n));
  if (!x || !work) {
    free(x); free(work);
    return CFD_ERR_ALLOC;
  }
  real* r = x + n;
  real* scratch = r + n;
  double* zero = work + cfd_fast_work_size(n);
  double* rd = zero + n;
  double* dx = rd + n;
  cfd_chain still = *c;  // M^-1 r: the ABA with qd = 0 and no gravity
  still.gravity[0] = still.gravity[1] = still.gravity[2] = 0;
  memset(zero, 0, sizeof(double) * n);
  int st = cfd_fd_fast_cpu(c, q, qd, tau, extra_diag, dx, work);
  for (int i = 0; i < n; i++) x[i] = dx[i];
  for (int step = 0; step < 3 && !st; step++) {
    id_ld(c, q, qd, x, r, scratch);
    for (int i = 0; i < n; i++) {
      real dj = (real)c->armature[i] + (extra_diag ? extra_diag[i] : 0);
      rd[i] = (double)((real)tau[i] - r[i] - dj * x[i]);
    }
    st = cfd_fd_fast_cpu(&still, q, zero, rd, extra_diag, dx, work);
    for (int i = 0; i < n; i++) x[i] += dx[i];
  }
  for (int i = 0; i < n && !st; i++) qacc[i] = (double)x[i];
  free(x);
  free(work);
  return st;
}
