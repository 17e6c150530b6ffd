// aba_world.h: the articulated-body algorithm in world coordinates, one state, for the GPU's
// thread-per-instance batch kernel (cuda/abia.cu) and, through the same code, its CPU check.
//
// Same sweeps as aba_core.h, but every spatial quantity is expressed in the world frame about the
// world origin (as MuJoCo's own recursions, which use a fixed frame): velocities then add along the
// chain (V_i = V_{i-1} + S_i qd_i) and an articulated inertia passes to the parent by addition,
// with no 6x6 congruence per link. Each link's rigid inertia is moved to the world instead, once
// (R I R^T and a parallel-axis shift): independent across links, where the congruence is a serial
// chain through the backward sweep.
//
// A GPU thread's per-link scratch is memory traffic (a batch of short chains has a thread per
// instance on every core, so the scratch of all of them must fit the L1 caches), so the sweeps keep
// only 7 numbers per link (U_i / d_i and u_i / d_i) and recompute the rest, sin/cos included:
//   out:  poses and velocities to the tip
//   in:   from the tip, the pose and velocity walked back (T_{i-1} = T_i T_loc^-1,
//         V_{i-1} = V_i - S_i qd_i: exact up to rounding, no storage), IA, pA, U, d, u
//   out:  poses and velocities again, accelerations
// World coordinates lose about (distance from the origin / link size)^2 rounding against link
// frames: the chain is moved so that its base is at the origin (cfd_abw_local), and the batch
// kernel takes this path for chains up to 32 links only (cuda/abia.cu).
#ifndef CHAINFD_ABA_WORLD_H
#define CHAINFD_ABA_WORLD_H

#include "cfd_math.h"
#include "chain.h"

enum { CFD_ABW_LINK_DOUBLES = 7 };  // slots per link: 0-5 U / d, 6 u / d

// A symmetric 3x3 as xx yy zz xy xz yz
CFD_HD void cfd_sym3_vec(const double A[6], const double x[3], double y[3]) {
  y[0] = A[0] * x[0] + A[3] * x[1] + A[4] * x[2];
  y[1] = A[3] * x[0] + A[1] * x[1] + A[5] * x[2];
  y[2] = A[4] * x[0] + A[5] * x[1] + A[2] * x[2];
}

// An articulated inertia [[A, B], [B^T, C]] about the world origin, A and C symmetric
typedef struct {
  double A[6], B[9], C[6];
} cfd_abw_inertia;

// y = I x
CFD_HD void cfd_abw_mul(const cfd_abw_inertia* I, const double x[6], double y[6]) {
  double a[3], b[3];
  cfd_sym3_vec(I->A, x, a);
  cfd_rot(I->B, x + 3, b);
  y[0] = a[0] + b[0]; y[1] = a[1] + b[1]; y[2] = a[2] + b[2];
  cfd_rotT(I->B, x, a);
  cfd_sym3_vec(I->C, x + 3, b);
  y[3] = a[0] + b[0]; y[4] = a[1] + b[1]; y[5] = a[2] + b[2];
}

// Link i's pose in its parent, home * exp(S q), from sin and cos of q (a rotation's angle; unused
// for a slide). jf: the chain is in joint frames (cfd_chain_in_joint_frames: every screw e_z), so
// the pose is H Rz(q) or H Tz(q), a few multiply-adds.
// The first link's home translation is left out: the whole chain moves so that its base sits at the
// world origin, which changes no qacc (gravity is uniform) but keeps the origin, the sweeps'
// reference point, near the links (the rounding grows as (distance / link size)^2, above).
// First the jf case alone, from the link's home pose (H, h): H Rz(q) (columns c H0 + s H1,
// c H1 - s H0, H2) for a hinge, H Tz(q) for a slide (slide != 0).
CFD_HD void cfd_abw_local_jf(const double H[9], const double h[3], int slide, double q, double s,
                             double co, double R[9], double p[3]) {
  if (!slide) {
    for (int r = 0; r < 3; r++) {
      R[3 * r] = co * H[3 * r] + s * H[3 * r + 1];
      R[3 * r + 1] = co * H[3 * r + 1] - s * H[3 * r];
      R[3 * r + 2] = H[3 * r + 2];
      p[r] = h[r];
    }
  } else {
    for (int r = 0; r < 3; r++) {
      R[3 * r] = H[3 * r]; R[3 * r + 1] = H[3 * r + 1]; R[3 * r + 2] = H[3 * r + 2];
      p[r] = h[r] + q * H[3 * r + 2];
    }
  }
}

// Then any link i (h: link 0's translation dropped as above)
CFD_HD void cfd_abw_local(const cfd_chain* c, int jf, int i, double q, double s, double co,
                          double R[9], double p[3]) {
  const double *H = c->home_R + 9 * i, *hp = c->home_p + 3 * i;
  double h[3] = {i ? hp[0] : 0, i ? hp[1] : 0, i ? hp[2] : 0};
  if (!jf) {
    double Re[9], pe[3];
    cfd_screw_exp_sc(c->screw + 6 * i, q, s, co, Re, pe);
    cfd_se3_mul(H, h, Re, pe, R, p);
  } else {
    cfd_abw_local_jf(H, h, c->screw[6 * i + 2] == 0, q, s, co, R, p);
  }
}

// sin and cos of link i's angle (0, 1 for a slide in joint frames: unused)
CFD_HD void cfd_abw_sincos(const cfd_chain* c, int jf, int i, double q, double* s, double* co) {
  if (jf && c->screw[6 * i + 2] == 0) *s = 0, *co = 1;
  else cfd_sincos(q, s, co);
}

// (R, p) <- (R, p) T_loc: from the world pose of link i's parent to link i's
CFD_HD void cfd_abw_next(const cfd_chain* c, int jf, int i, double q, double s, double co,
                         double R[9], double p[3]) {
  double Rl[9], pl[3], Rn[9], pn[3];
  cfd_abw_local(c, jf, i, q, s, co, Rl, pl);
  cfd_se3_mul(R, p, Rl, pl, Rn, pn);
  for (int k = 0; k < 9; k++) R[k] = Rn[k];
  for (int k = 0; k < 3; k++) p[k] = pn[k];
}

// The screw of link i in the world, for the link's world pose (R, p): [R w; R v + p x R w]
// (in joint frames: [z; p x z] for a hinge, [0; z] for a slide, z = R's third column)
CFD_HD void cfd_abw_screw(const double* S, int jf, const double R[9], const double p[3],
                          double Sw[6]) {
  double t[3];
  if (jf) {
    double z[3] = {R[2], R[5], R[8]};
    if (S[2] != 0) {
      cfd_cross(p, z, t);
      for (int k = 0; k < 3; k++) Sw[k] = z[k], Sw[3 + k] = t[k];
    } else {
      for (int k = 0; k < 3; k++) Sw[k] = 0, Sw[3 + k] = z[k];
    }
    return;
  }
  cfd_rot(R, S, Sw);
  cfd_rot(R, S + 3, Sw + 3);
  cfd_cross(p, Sw, t);
  Sw[3] += t[0]; Sw[4] += t[1]; Sw[5] += t[2];
}

// Link i's rigid inertia moved to the world about the origin. J about the link origin in the link
// frame is [[I_o, m c^], [m c^T, m]]; in the world, with y = R (m c) and p the link origin,
//   J_w = [[I_O, h^], [h^T, m]],  I_O = R I_o R^T + (m |p|^2 + 2 p.y) 1 - (m p p^T + p y^T + y p^T),
//   h = m p + y.
// Writes I_O (xx yy zz xy xz yz), h and m: 10 numbers, J10, from the link-frame rotational inertia
// about the link origin Io (3x3, row-major), the first moment m c and the mass.
CFD_HD void cfd_abw_rigid_parts(const double Io[9], const double mc[3], double m, const double R[9],
                                const double p[3], double J10[10]) {
  double y[3], T[9];
  cfd_rot(R, mc, y);
  for (int r = 0; r < 3; r++)  // T = R I_o
    for (int k = 0; k < 3; k++)
      T[3 * r + k] = R[3 * r] * Io[k] + R[3 * r + 1] * Io[3 + k] + R[3 * r + 2] * Io[6 + k];
  double py = cfd_dot3(p, y), pp = cfd_dot3(p, p), diag = m * pp + 2 * py;
  // I_O = T R^T + shift, the six distinct entries
#define CFD_ABW_IO(e, r, k)                                                                       \
  J10[e] = T[3 * r] * R[3 * k] + T[3 * r + 1] * R[3 * k + 1] + T[3 * r + 2] * R[3 * k + 2] -      \
           (m * p[r] * p[k] + p[r] * y[k] + y[r] * p[k]) + (r == k ? diag : 0)
  CFD_ABW_IO(0, 0, 0); CFD_ABW_IO(1, 1, 1); CFD_ABW_IO(2, 2, 2);
  CFD_ABW_IO(3, 0, 1); CFD_ABW_IO(4, 0, 2); CFD_ABW_IO(5, 1, 2);
#undef CFD_ABW_IO
  for (int k = 0; k < 3; k++) J10[6 + k] = m * p[k] + y[k];
  J10[9] = m;
}

// The parts of a link-frame 6x6 inertia J (cfd_chain's layout) that cfd_abw_rigid_parts takes
CFD_HD void cfd_abw_inertia_parts(const double* J, double Io[9], double mc[3], double* m) {
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 3; k++) Io[3 * r + k] = J[6 * r + k];
  mc[0] = J[16]; mc[1] = J[5]; mc[2] = J[9];
  *m = J[21];
}

CFD_HD void cfd_abw_rigid(const double* J, const double R[9], const double p[3], double J10[10]) {
  double Io[9], mc[3], m;
  cfd_abw_inertia_parts(J, Io, mc, &m);
  cfd_abw_rigid_parts(Io, mc, m, R, p, J10);
}

// y = J_w x for a world inertia J10: [I_O w + h x v;  m v + w x h]
CFD_HD void cfd_abw_rigid_mul(const double J10[10], const double x[6], double y[6]) {
  const double* h = J10 + 6;
  double t1[3], t2[3];
  cfd_sym3_vec(J10, x, y);
  cfd_cross(h, x + 3, t1);
  cfd_cross(x, h, t2);
  for (int k = 0; k < 3; k++) y[k] += t1[k], y[3 + k] = J10[9] * x[3 + k] + t2[k];
}

// The rigid-body bias force -ad*_V J_w V = [w x L + v x P; w x P] of a world inertia J10 at world
// velocity V, with (L; P) = J_w V.
CFD_HD void cfd_abw_bias(const double J10[10], const double V[6], double bias[6]) {
  double JV[6], t1[3], t2[3];
  cfd_abw_rigid_mul(J10, V, JV);
  cfd_cross(V, JV, t1);
  cfd_cross(V + 3, JV + 3, t2);
  cfd_cross(V, JV + 3, bias + 3);
  for (int k = 0; k < 3; k++) bias[k] = t1[k] + t2[k];
}

// I += J_w; h^ = [[0, -h2, h1], [h2, 0, -h0], [-h1, h0, 0]]
CFD_HD void cfd_abw_add(cfd_abw_inertia* I, const double J10[10]) {
  const double* h = J10 + 6;
  double m = J10[9];
  for (int e = 0; e < 6; e++) I->A[e] += J10[e];
  I->B[1] -= h[2]; I->B[2] += h[1]; I->B[3] += h[2];
  I->B[5] -= h[0]; I->B[6] -= h[1]; I->B[7] += h[0];
  I->C[0] += m; I->C[1] += m; I->C[2] += m;
}

// IA -= w U^T for w = U / d: the rank-one update U U^T / d of the sweep in, on A and C's distinct
// entries and on B
CFD_HD void cfd_abw_sub_outer(cfd_abw_inertia* IA, const double w[6], const double U[6]) {
  IA->A[0] -= w[0] * U[0]; IA->A[1] -= w[1] * U[1]; IA->A[2] -= w[2] * U[2];
  IA->A[3] -= w[0] * U[1]; IA->A[4] -= w[0] * U[2]; IA->A[5] -= w[1] * U[2];
  IA->C[0] -= w[3] * U[3]; IA->C[1] -= w[4] * U[4]; IA->C[2] -= w[5] * U[5];
  IA->C[3] -= w[3] * U[4]; IA->C[4] -= w[3] * U[5]; IA->C[5] -= w[4] * U[5];
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 3; k++) IA->B[3 * r + k] -= w[r] * U[3 + k];
}

// qacc for one state; vectors and scratch as cfd_aba_core_ex (entries vstride and stride apart);
// work holds CFD_ABW_LINK_DOUBLES * n entries. jf: c is in joint frames (cfd_abw_local).
CFD_HD int cfd_aba_world(const cfd_chain* c, int jf, const double* q, const double* qd, const double* tau,
                         const double* extra_diag, double* qacc, long vstride, double* work,
                         long stride) {
  int n = c->n;
#define W(i, k) work[((long)(i) * CFD_ABW_LINK_DOUBLES + (k)) * stride]
  // out: world poses and velocities to the tip
  double R[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, p[3] = {0, 0, 0}, V[6] = {0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; i++) {
    double qi = q[i * vstride], s, co, Sw[6];
    cfd_abw_sincos(c, jf, i, qi, &s, &co);
    cfd_abw_next(c, jf, i, qi, s, co, R, p);
    cfd_abw_screw(c->screw + 6 * i, jf, R, p, Sw);
    double qdi = qd[i * vstride];
    for (int k = 0; k < 6; k++) V[k] += Sw[k] * qdi;
  }

  // in: articulated inertia and bias force about the world origin, walking the poses back
  cfd_abw_inertia IA;
  for (int k = 0; k < 6; k++) IA.A[k] = IA.C[k] = 0;
  for (int k = 0; k < 9; k++) IA.B[k] = 0;
  double pA[6] = {0, 0, 0, 0, 0, 0};
  for (int i = n - 1; i >= 0; i--) {
    double Sw[6], bias[6], U[6];
    cfd_abw_screw(c->screw + 6 * i, jf, R, p, Sw);
    double J10[10];
    cfd_abw_rigid(c->inertia + 36 * i, R, p, J10);
    cfd_abw_bias(J10, V, bias);
    cfd_abw_add(&IA, J10);
    for (int k = 0; k < 6; k++) pA[k] += bias[k];
    cfd_abw_mul(&IA, Sw, U);
    double d = cfd_dot6(Sw, U) + c->armature[i] + (extra_diag ? extra_diag[i * vstride] : 0);
    if (!(d > 0)) return CFD_ERR_SINGULAR;
    double qdi = qd[i * vstride], u = tau[i * vstride] - cfd_dot6(Sw, pA), inv = 1 / d;
    double su = u * inv, w[6];
    for (int k = 0; k < 6; k++) W(i, k) = w[k] = U[k] * inv;
    W(i, 6) = su;
    if (i == 0) break;
    // Ia = IA - U U^T / d,  pa = pA + Ia c + U u / d, with c = V x S qd; the parent adds its own
    double Sqd[6], ci[6], Ic[6];
    for (int k = 0; k < 6; k++) Sqd[k] = Sw[k] * qdi;
    cfd_ad(V, Sqd, ci);
    cfd_abw_sub_outer(&IA, w, U);
    cfd_abw_mul(&IA, ci, Ic);
    for (int k = 0; k < 6; k++) pA[k] += Ic[k] + U[k] * su;
    // the parent's pose and velocity: T_{i-1} = T_i T_loc^-1, V_{i-1} = V_i - S_i qd_i
    double Rl[9], pl[3], Rp[9], t[3], sn, co;
    cfd_abw_sincos(c, jf, i, q[i * vstride], &sn, &co);
    cfd_abw_local(c, jf, i, q[i * vstride], sn, co, Rl, pl);
    for (int r = 0; r < 3; r++)  // R_{i-1} = R_i Rl^T
      for (int k = 0; k < 3; k++)
        Rp[3 * r + k] = R[3 * r] * Rl[3 * k] + R[3 * r + 1] * Rl[3 * k + 1] + R[3 * r + 2] * Rl[3 * k + 2];
    cfd_rot(Rp, pl, t);
    for (int k = 0; k < 9; k++) R[k] = Rp[k];
    for (int k = 0; k < 3; k++) p[k] -= t[k];
    for (int k = 0; k < 6; k++) V[k] -= Sqd[k];
  }

  // out: accelerations, the poses and velocities recomputed
  double a[6] = {0, 0, 0, -c->gravity[0], -c->gravity[1], -c->gravity[2]};
  for (int k = 0; k < 9; k++) R[k] = (k % 4 == 0);
  for (int k = 0; k < 3; k++) p[k] = 0;
  for (int k = 0; k < 6; k++) V[k] = 0;
  for (int i = 0; i < n; i++) {
    double qi = q[i * vstride], Sw[6], Sqd[6], ci[6], w[6], sn, co;
    cfd_abw_sincos(c, jf, i, qi, &sn, &co);
    cfd_abw_next(c, jf, i, qi, sn, co, R, p);
    cfd_abw_screw(c->screw + 6 * i, jf, R, p, Sw);
    double qdi = qd[i * vstride];
    for (int k = 0; k < 6; k++) Sqd[k] = Sw[k] * qdi;
    cfd_ad(V, Sqd, ci);
    for (int k = 0; k < 6; k++) V[k] += Sqd[k], a[k] += ci[k], w[k] = W(i, k);
    double qa = W(i, 6) - cfd_dot6(w, a);
    qacc[i * vstride] = qa;
    for (int k = 0; k < 6; k++) a[k] += Sw[k] * qa;
  }
#undef W
  return CFD_OK;
}

#endif  // CHAINFD_ABA_WORLD_H
